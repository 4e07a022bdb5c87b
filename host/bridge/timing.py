"""When the bridge client's requests go and how long it waits for them (part of DeviceClient).

One concern of :class:`~leadwire.bridge.client.DeviceClient`, kept in its own module: the
retransmission timeout (RTO, :mod:`~leadwire.bridge.rtt`), the tail-loss probe, the POLL copies
(:mod:`~leadwire.bridge.copies`), the device's generation rate and from it the pipelining decision
and the turnover hint, the dead-link back-off after silent rounds, and the adaptive poll interval.
A mixin rather than a member: these rules read and write the one client's state (its core
PollClient, counters, outstanding request) on every request and answer, and the attribute names
are the client's public ones (``rto``, ``rtt``, ``copies``, ``send_copy``, ``next_delay``). The
tuning numbers are PollConfig fields (``pipeline_min_events`` ...): measured defaults, set by tests
to compare a rule with and without.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from leadwire import auth as core_auth
from leadwire import codec, u32, wire

from .config import DeviceConfig, PollConfig
from .copies import PollCopies
from .rtt import RttEstimator, serial_floor

# request kinds (DeviceClient.outstanding)
REQ_HELLO = 1
REQ_SUBSCRIBE = 2
REQ_POLL = 3


class RequestTiming:
    """The timing half of DeviceClient (see the module docstring)."""

    if TYPE_CHECKING:  # the client's state these rules use
        pc: Any
        poll_cfg: PollConfig
        cfg: DeviceConfig
        dc: dict[str, int]
        dirty: bool
        outstanding: int
        capacity: int

    def _init_timing(self, cfg: DeviceConfig, poll: PollConfig) -> None:
        """Retransmission timing, the loss probes, the POLL copies and the rates (none measured yet)."""
        floor = poll.rto_min
        if cfg.transport == "serial":
            sig = core_auth.AUTH_SIZE if cfg.key is not None else 0
            req = wire.OVERHEAD + 16 + sig  # a POLL (n, max_events, max_bytes, frames) or HELLO
            floor = max(floor, serial_floor(cfg.baud, req, wire.OVERHEAD + poll.max_bytes + sig))
        self.rtt = RttEstimator(floor, poll.timeout)
        self.rto = self.rtt.rto  # the RTO the outstanding request was sent with
        # the silent rounds in a row so far: the RTOs they waited (at least), and those that also
        # waited the dead-link backoff (on_transport_error)
        self._silent_s = 0.0
        self._slow_rounds = 0
        self._last_rx_s = float("-inf")  # when the last polling frame arrived (rtt.on_answer)
        self._early_gap: int | None = None  # n when a gap in a pipelined POLL's burst was asked for
        self.early_gaps = 0  # such gaps asked for before the pipelined POLL's answer showed them
        self.third_polls = 0  # POLLs from a held burst's end sent while its early gap was out
        self._early_gap_next = -1  # tag of the pipelined POLL that was out when the early gap went
        # tail-loss probe (_arm): the outstanding POLL was armed with the probe, not the RTO
        self._probing = False
        self._probed = False  # a probe fired since the last round-trip sample: the next send waits the RTO
        self._loss_send = -(10**9)  # rtt.sends when a frame last showed a gap (datagrams lost lately)
        self.probes = 0  # probes that fired
        # POLL copies: send_copy, the request just made goes twice (daemon._send); never signed
        # (a copy of a signed frame is a replay)
        self.copies = PollCopies(poll.copies and cfg.transport == "udp" and cfg.key is None)
        self.send_copy = False
        # adaptive polling
        self.interval = poll.interval
        self.next_delay = 0.0
        self._rate = 0.0  # events received per second, EWMA
        # the device's generation rate (EWMA), from its newest offset as answers show it (n + backlog,
        # a RECOVERY's n1): unlike _rate it counts the events an overrun lost
        self._gen_rate = 0.0
        self._newest: tuple[int, int | None, float] | None = None  # (newest offset, epoch, when)
        self._burst_events = 0  # events received in the outstanding burst so far
        self._last_answer_s: float | None = None

    def _plan_poll(self) -> None:
        """Before a POLL: whether it may be pipelined, and the turnover hint (PollClient.turnover)."""
        pc = self.pc
        p = self.poll_cfg
        # pipelined POLLs only where they pay: a few events generated per round trip (EWMA rate x
        # SRTT >= pipeline_min_events). Below that a POLL sent before the burst is in finds nothing
        # new: a round trip of bridge CPU for no event. The generation rate counts when higher: an
        # overrunning ring delivers fewer events than it makes
        srtt = self.rtt.srtt or 0.0
        per_rtt = max(self._rate, self._gen_rate) * srtt
        pc.pipeline = p.pipeline and (not p.adaptive or per_rtt >= p.pipeline_min_events)
        # an overrun's RECOVERY starts past what the ring turns over before our next POLL gets there:
        # the generation rate x (SRTT + min(2 RTTVAR, SRTT)); 0 at low rates (the spec's n0 - 1).
        # Too short a skip costs one more RECOVERY and a round trip's events; too long a one loses
        # events the ring still held (2 RTTVAR uncapped is several SRTTs on a loaded host): the
        # margin is at most one round trip's events and half the ring
        margin = self._gen_rate * min(2 * self.rtt.rttvar, srtt)
        if self.capacity:
            margin = min(margin, self.capacity / 2)
        turnover = int(self._gen_rate * srtt + margin)
        if 0 < turnover < self.capacity:
            # an undershoot costs a RECOVERY and a round trip, an overshoot only the events skipped:
            # lean long by turnover_slack (+ 1), staying within the ring (at most capacity - 1: a
            # skip onto n1 or past it is leadwire.hold's chase rule, not this estimate's)
            turnover = min(int(turnover * (1 + p.turnover_slack)) + 1, self.capacity - 1)
        pc.turnover = turnover

    def _arm(self, f: codec.Frame, now_s: float) -> None:
        """The request f goes now: its RTO (or the tail-loss probe's shorter wait) and its copy."""
        pc = self.pc
        rtt = self.rtt
        self.rto = rtt.on_send(f.message_id, now_s)
        self._probing = False
        # the link lost a datagram lately: a frame arrived past a gap within the last probe_recent
        # sends (a POLL; pipelining on, or any rate over UDP, where a lost answer and two silent
        # retries overrun a ring that turns over in a few RTOs)
        lossy = (
            f.type == wire.POLL
            and (pc.pipeline or self.cfg.transport == "udp")
            and rtt.sends - self._loss_send < self.poll_cfg.probe_recent
        )
        if lossy and not self._probed and not rtt.backoff and rtt.srtt is not None:
            # tail-loss probe: a POLL (or its one-frame answer) lost is found at SRTT + 2 RTTVAR +
            # probe_margin instead of the RTO (whose floor is there for a loaded host's late
            # answers); once per sample: a second silence waits the RTO. A probe that was not needed
            # costs a duplicate answer (logged as duplicate arrivals, never stored twice)
            probe = rtt.srtt + 2 * rtt.rttvar + self.poll_cfg.probe_margin
            if probe < self.rto:
                self.rto = probe
                self._probing = True
        # the same POLL twice on a lossy link: a lost POLL costs the device a silence of SRTT +
        # 2 RTTVAR with its ring filling; both copies are lost at 5% loss 1 time in 400, and the
        # device answers one of them (messages.poll_key)
        self.send_copy = self.copies.on_send(f.message_id, lossy)

    def on_transport_error(self) -> float:
        """No answer in time (or a broken one): the same request again after the returned delay.

        The wait was the RTO, doubled by each timeout in a row (rtt.py): the retries go out at once.
        From the third silent round in a row on, the next request is a HELLO (the device may have
        restarted), and once the rounds in a row have waited at least ``dead_silence`` x ``timeout``
        (the sum of their RTOs) a bounded exponential backoff from ``timeout / 2`` to
        ``backoff_max`` spares a dead link: its first wait at most doubles the silence seen, so a
        short RTO's few timeouts in a row on a lossy link never idle a ring past its turnover."""
        self.dc["timeouts"] += 1
        self.dirty = True
        p = self.poll_cfg
        if self.outstanding == REQ_SUBSCRIBE:
            self.outstanding = 0
            self.next_delay = 0.0
            return 0.0
        self.outstanding = 0
        pc = self.pc
        if self._probing:
            # the tail-loss probe fired: the same request again at once, no back-off (the RTO was
            # not reached) and not a silent round (the HELLO and the dead-link wait count RTOs)
            self._probing = False
            self._probed = True
            self.probes += 1
            self.rtt.on_timeout(pc.tag, backoff=False)
            pc.on_probe()
            self.next_delay = 0.0
            return 0.0
        self.rtt.on_timeout(pc.tag)
        pc.on_timeout()
        if pc.consecutive_errors == 1:  # the first silent round since an answer
            self._silent_s = 0.0
            self._slow_rounds = 0
        self._silent_s += self.rto  # the RTO this request was armed with: waited at least that
        k = pc.consecutive_errors - 2
        if k > 0 and pc.polling:
            pc.ask_hello()  # silent for a while: the device may have restarted
        if k > 0 and self._silent_s >= p.timeout * p.dead_silence:
            self._slow_rounds += 1
            self.next_delay = min(p.backoff_max, p.timeout * 0.5 * (1 << min(self._slow_rounds - 1, 16)))
        else:
            self.next_delay = 0.0
        return self.next_delay

    def _saw_newest(self, newest: int, now_s: float) -> None:
        """The device held events up to `newest` when it answered: the generation-rate EWMA, from
        answers at least gen_rate_span apart (per answer, not per event)."""
        last = self._newest
        epoch = self.pc.epoch
        if last is None or last[1] != epoch:
            self._newest = (newest, epoch, now_s)
            self._gen_rate = 0.0
            return
        dt = now_s - last[2]
        if dt < self.poll_cfg.gen_rate_span:
            return
        k = u32.diff(newest, last[0])
        self._newest = (newest, epoch, now_s)
        if k < 0:
            return
        inst = k / dt
        self._gen_rate = 0.7 * self._gen_rate + 0.3 * inst if self._gen_rate > 0 else inst

    def _adapt(self, now_s: float, got: int, backlog: int, full: bool) -> None:
        """The poll interval after an answer that brought `got` events (adaptive polling)."""
        p = self.poll_cfg
        last = self._last_answer_s
        self._last_answer_s = now_s
        if not p.adaptive:
            self.next_delay = 0.0 if backlog > 0 else p.interval
            return
        if last is not None and now_s > last:
            inst = got / (now_s - last)
            self._rate = 0.7 * self._rate + 0.3 * inst if self._rate > 0 else inst
        if backlog > 0 or full:
            # the ring is filling faster than we drain it: drain now, and poll sooner from now on
            self.interval = max(p.interval_min, self.interval * 0.5)
            self.next_delay = 0.0
            return
        if got == 0:
            self.interval = min(p.interval_max, self.interval * 1.5)
        else:
            # aim for answers about half full: rate * interval ~ target events per poll
            per_poll = p.batch * p.frames  # events one poll (a burst of p.frames) can bring
            target = max(1.0, min(per_poll / 2, self.capacity / 4 if self.capacity else per_poll / 2))
            want = target / self._rate if self._rate > 0 else self.interval
            self.interval = min(p.interval_max, max(p.interval_min, want))
        self.next_delay = self.interval
