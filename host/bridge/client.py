"""The per-device bridge client: sans-I/O (no sockets, no clocks; h11 style).

The asyncio layer (daemon.py) asks :meth:`DeviceClient.request` for the next frame to send, feeds
every frame received from the device to :meth:`DeviceClient.on_frame`, and reports a missing or
broken answer with :meth:`DeviceClient.on_transport_error`. Time comes in as arguments. What the
client decides to store, it appends to its ``out_*`` lists, which the store drains in one
transaction together with :meth:`DeviceClient.snapshot` (the client offset n and the counters).

Spec 004 itself (the offset n, matching answers to requests by tag, the recovery phase, overrun
vs restart vs first contact and the exact loss count) is the core's ``leadwire.client.PollClient``;
this class wraps it with what the bridge adds: lead (spec 000) and duplicate flags for every
arrival, push sessions (spec 003), adaptive polling, periodic HELLO, counters and the rows to store.
The client table it follows (docs/protocol.md 6.1, "States"):

======================  ===========================================================================
answer to POLL(n)       what the client does
======================  ===========================================================================
EVENTS from s(n)        case 1: store the batch, n = its last offset, poll again (now if backlog)
NO_EVENT(n)             case 2: nothing new, poll n again later
RECOVERY(n0, n1, E)     case 3: classify by the boot epoch E it carries (new epoch: restart; no
                        event of this boot yet: first contact; else overrun with exactly
                        (n0 - s(n)) mod 2^32 lost), record the loss, set n = n0 - 1 and consume
                        n0..n1 (the recovery phase). The bridge's additions (leadwire.hold,
                        docs/protocol.md 6.3): frames held past a gap are taken first and only the
                        overwritten gaps counted; the start skips what the ring turns over in a
                        round trip, past n1 if need be (counted once shown generated)
RECOVERY behind n       after a skip past n1, the device not there yet (AHEAD): poll n again at
                        its generation pace
no answer / bad frame   transport error: poll n again at once (the wait was the RTO, below); after
                        3 silent rounds also HELLO, with a bounded exponential backoff
======================  ===========================================================================

How long "no answer" is: the request's retransmission timeout (RTO), from this link's measured
round trips (:mod:`~leadwire.bridge.rtt`, RFC 6298): every POLL and HELLO is recorded by its tag
when it goes out, and the first frame carrying that tag is its round-trip sample, even when it
comes after the request was sent again (then the retransmission was spurious, and the long sample
raises the RTO). ``polling.timeout`` is the ceiling; ``polling.rto_min`` (or a serial line's time
for one request and one answer frame) the floor; consecutive timeouts double it (back-off).

Answers that do not answer the outstanding poll (a late or duplicated datagram) are still
arrivals: their events are logged with their lead (spec 000) and ``duplicate`` set, never stored
twice. Every protocol detail (layouts, CRC, u32 arithmetic, lead) comes from the leadwire core.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from leadwire import auth as core_auth
from leadwire import auth_host, codec, messages, u32, wire
from leadwire import client as core
from leadwire.hold import AHEAD, HoldingPollClient
from leadwire.lead import LeadTracker

from .config import DeviceConfig, PollConfig
from .push import PushSessions
from .rows import (
    CHANNEL_COUNTERS,
    DEVICE_COUNTERS,
    EVENT_LEAD_CHANNEL,
    SEG_ARRIVAL,
    SEG_EVENT,
    Delivery,
    Rows,
)
from .timing import REQ_HELLO, REQ_POLL, RequestTiming

__all__ = [
    "AUTH_REJECTS",
    "CHANNEL_COUNTERS",
    "DEVICE_COUNTERS",
    "EVENT_LEAD_CHANNEL",
    "SEG_ARRIVAL",
    "SEG_EVENT",
    "Boot",
    "ClientState",
    "Delivery",
    "DeviceClient",
    "Loss",
]

# what admit() makes of a frame's authentication (besides wire.OK)
AUTH_REJECTS = {wire.E_AUTH: "auth_forged", wire.E_REPLAY: "auth_replayed", wire.E_UNSIGNED: "auth_unsigned"}
_SPARE = bytes(core_auth.AUTH_SIZE)


def random_nonce() -> int:
    """A fresh HELLO nonce (auth.py: random, new for every request)."""
    return int.from_bytes(os.urandom(4), "big")


class Loss(core.Loss):
    """One recovery phase (spec 004 case 3) the client acted on, and its row of the losses table.

    The core's Loss record itself (PollClient.loss_type: the core makes it and keeps lost,
    recovered and ended up to date), with what the row adds: its number, when it started and
    ended, and the lost count the device counters already hold (``counted``)."""

    __slots__ = ("counted", "ended_us", "seq", "started_us")

    def __init__(
        self, cause: str, client_n: int, n0: int, n1: int, epoch: int, lost: int | None, skipped: int = 0
    ) -> None:
        super().__init__(cause, client_n, n0, n1, epoch, lost, skipped)
        self.seq = 0
        self.started_us = 0
        self.ended_us: int | None = None
        self.counted = lost

    @classmethod
    def row(
        cls, seq: int, boot_epoch: int, client_n: int, n0: int, n1: int, lost: int | None, cause: str,
        started_us: int, ended_us: int | None = None, recovered: int = 0,
    ) -> Loss:  # fmt: skip
        """A Loss from its stored row (the store's column order)."""
        r = cls(cause, client_n, n0, n1, boot_epoch, lost)
        r.seq, r.started_us, r.ended_us, r.recovered = seq, started_us, ended_us, recovered
        return r

    @property
    def boot_epoch(self) -> int:
        return self.epoch  # type: ignore[no-any-return]


@dataclass
class Boot:
    boot_epoch: int
    boots: int
    firmware: str
    board: str
    first_seen_us: int
    detected_by: str  # "hello" | "recovery"


@dataclass
class ClientState:
    """What the store keeps per device between runs (loaded into a new DeviceClient)."""

    n: int = 0
    has_n: bool = False  # an event or range of the current boot is known (PollClient.fresh is False)
    boot_epoch: int | None = None
    boots: int = 0
    lead_last: int | None = None  # highest event offset seen in this boot (lead state, spec 000)
    arrival: int = 0  # per-device arrival counter (strictly increasing across runs)
    loss_seq: int = 0
    session: int = 0
    firmware: str = ""
    board: str = ""
    board_id: str = ""
    counters: dict[str, Any] = field(default_factory=dict)
    recovery: Loss | None = None  # a recovery phase still open when the state was saved


# A little over ~400 lines: what is left here are the poll rules' entry points (answers, timeouts,
# sends), which read and write the same fields; the concerns that could leave did (timing, push, rows).
class DeviceClient(RequestTiming, PushSessions, Rows):
    """One device's client (the module docstring); its concerns in their own modules: request
    timing (timing.py), push sessions (push.py), output rows and counters (rows.py)."""

    def __init__(
        self,
        dev_key: int,
        cfg: DeviceConfig,
        poll: PollConfig,
        state: ClientState | None = None,
        deliver: bool = False,
        nonce: Callable[[], int] = random_nonce,
    ) -> None:
        st = state or ClientState()
        # authentication: the host's end of the device's link, None with `auth = false`
        self.auth = auth_host.HostEndpoint(cfg.key) if cfg.key is not None else None
        self._nonce = nonce
        self.dev_key = dev_key
        self.device_id = cfg.id
        self.cfg = cfg
        self.poll_cfg = poll
        self.deliver = deliver  # build Delivery objects for subscription callbacks
        self.ts_prefix = cfg.timestamp == "prefix_us"
        self._resume(st)
        self.outstanding = 0
        self.send_again = False  # request() made a POLL the caller sends another one right after
        self._last_hello_s = -1e18
        self._init_push()
        self._init_timing(cfg, poll)
        self._init_outputs(st)

    def _resume(self, st: ClientState) -> None:
        """The core's client and the device's records, from the stored state (a fresh one: none)."""
        poll = self.poll_cfg
        # spec 004: the core's client, resumed from the stored offset
        # (HoldingPollClient: frames after a lost one are kept; the repoll asks for the gap only)
        self.pc = HoldingPollClient(st.n, st.boot_epoch, not st.has_n, poll.rules)
        self.pc.loss_type = Loss  # the core's Loss records are the losses rows
        self.pc.pipeline = poll.pipeline
        self.pc.follow = poll.follow
        self.recovery: Loss | None = None  # the open recovery phase (a losses row)
        if st.recovery is not None and st.boot_epoch is not None:
            self.recovery = st.recovery
        # tags from a random start: a restarted bridge polling from the same committed n with the
        # tags of its previous life would send the POLL the device answered last again, which the
        # device takes for a copy and does not answer (docs/protocol.md 5, "Copies")
        self.pc.resume(random.randrange(256), self.recovery)
        # Every run starts with a HELLO: it names the boot (a device restarted while the bridge was
        # down shows a new epoch) and refreshes firmware/board. PollClient asks for one only
        # before the first epoch is known.
        self.pc.ask_hello()
        self.boots = st.boots
        self.arrival = st.arrival
        self.loss_seq = st.loss_seq
        self.session = st.session
        self.firmware = st.firmware
        self.board = st.board
        self.board_id = st.board_id
        self.capacity = 0
        # the last boot a boots row was written for: none yet in this run, so the run's first HELLO
        # writes its boot's row (INSERT OR IGNORE keeps an existing one). A restart found by a
        # RECOVERY and committed just before a SIGKILL (its HELLO not answered yet) gets its row.
        self._booted: int | None = None
        restart = st.recovery is not None and st.recovery.cause == core.RESTART
        self._boot_by_recovery: int | None = st.boot_epoch if restart else None
        self.lead = LeadTracker()
        if st.boot_epoch is not None and st.lead_last is not None:
            self.lead.lead(self.device_id, EVENT_LEAD_CHANNEL, st.lead_last)  # seeds last_seq
        self.lead_last = st.lead_last

    def reset(self) -> None:
        """Start this device's client again from where it is, as a restarted bridge would from the
        store: the core's client from the offset n, the epoch and the open recovery phase (a HELLO
        first, no held frames, no request outstanding), request timing and push sessions new.
        Counters and the outputs not yet drained stay: n is the last offset taken, so nothing is
        stored twice, and what the device generated after n is polled again or, overwritten,
        counted lost by the RECOVERY that says so (exact: the client knows n and the epoch)."""
        pc = self.pc
        st = ClientState(
            pc.n, not pc.fresh, pc.epoch, self.boots, self.lead_last, self.arrival, self.loss_seq,
            self.session, self.firmware, self.board, self.board_id, recovery=self.recovery,
        )  # fmt: skip
        booted, by_recovery = self._booted, self._boot_by_recovery
        self._resume(st)
        self._booted, self._boot_by_recovery = booted, by_recovery  # the boot's row as it stood
        self.outstanding = 0
        self.send_again = False
        self._init_timing(self.cfg, self.poll_cfg)
        self._end_sessions()
        self.dirty = True

    @property
    def n(self) -> int:
        """The client offset n of spec 004."""
        return self.pc.n

    @property
    def epoch(self) -> int | None:
        return self.pc.epoch

    # -- requests ------------------------------------------------------------------------

    def request_bytes(self, now_s: float, hello: bool = False) -> bytes:
        """The next request as bytes on the wire: request(), signed when the device has a key (a
        HELLO carries a fresh random nonce in its seq and starts a new session)."""
        f = self.request(now_s, hello)
        ep = self.auth
        if ep is None:
            return codec.encode(f)
        if f.type == wire.HELLO:
            f.seq = self._nonce() & 0xFFFFFFFF
            buf = bytearray(codec.encode(f))
            buf += _SPARE
            return bytes(buf[: ep.host_sign_hello(buf, len(buf) - core_auth.AUTH_SIZE)])
        return self.sign(codec.encode(f))

    def sign(self, data: bytes) -> bytes:
        """Sign one frame for the device in the current session (ACKs, SUBSCRIBE, POLL); as is when
        the device has no key."""
        ep = self.auth
        if ep is None:
            return data
        buf = bytearray(data)
        buf += _SPARE
        return bytes(buf[: ep.sign_into(buf, len(data))])

    def admit(self, data: bytes) -> int:
        """Check the authentication of a frame that passed wire.check (codec.decode): wire.OK, or a
        reject, counted (auth_forged / auth_replayed / auth_unsigned); HINT asks for a handshake.
        Without a key a signed frame is a bad frame (E_FLAGS): the bridge was told the device has
        no key. Nothing of a rejected frame is acted on."""
        ep = self.auth
        signed = data[1] & (wire.F_AUTH << 4)
        if ep is None:
            if signed:
                self.on_bad_frame(wire.E_FLAGS)
                return wire.E_FLAGS
            return wire.OK
        n = len(data)  # checked in place (read only): no copy
        if wire.frame_type(data) == wire.HELLO and n > wire.OVERHEAD + (core_auth.AUTH_SIZE if signed else 0):
            code = ep.host_hello(data, n)
            if code == core_auth.HINT:
                self.pc.ask_hello()  # a boot HELLO: proof of the key, not of freshness
                return code
            if code == wire.E_REPLAY and ep.newer_session(data, n):
                # a HELLO answer with a newer session K than ours: a late copy of one of our older
                # HELLO requests reached the device, which moved on to a session under that old
                # nonce, whose frames we cannot take. Hand-shake again now rather than after three
                # silent rounds. (A copy of the current request keeps the session: auth.py; late
                # copies of older answers carry older K: ignored.)
                self.pc.ask_hello()
        else:
            code = ep.verify(data, n)
        if code:
            self.dc[AUTH_REJECTS[code]] += 1
            self.dirty = True
        return code

    def request(self, now_s: float, hello: bool = False) -> codec.Frame:
        """The next frame to send (HELLO, SUBSCRIBE or POLL(n)); it becomes the outstanding request.
        hello: the periodic HELLO (periodic_hello said it is due), sent between two POLLs; a
        timeout of it leaves the next request a POLL."""
        pc = self.pc
        if self.auth is not None and not self.auth.live:
            pc.ask_hello()  # no session: every request before the handshake would be refused
        if self.need_subscribe and pc.polling and not pc.hello_due:
            return self._subscribe_request()
        self._burst_events = 0
        self._plan_poll()
        p = self.poll_cfg
        f = pc.next_request(p.batch, p.max_bytes, p.frames, hello)
        if f.type == wire.POLL:
            self.outstanding = REQ_POLL
            self.dc["polls"] += 1
            # a gap repoll that predicts where the held frames' burst ends (leadwire.hold): the next
            # POLL, from there, goes out now too (two in flight), as after a pipelined burst's frame 0
            self.send_again = pc.ahead is not None
        else:
            self.outstanding = REQ_HELLO
        self._arm(f, now_s)
        return f

    def periodic_hello(self, now_s: float) -> bool:
        """Whether a periodic HELLO is due: every ``hello_interval``, for a device without a key,
        whose restart with an empty ring is seen nowhere else (its new boot answers a POLL with
        NO_EVENT: spec 004's note). The caller sends it between two POLLs (``request(hello=True)``),
        never in a POLL's slot, so the POLLs keep their times.

        A device with a key needs none: a new boot has no session and refuses every POLL of the
        session before (auth.py), and a board says so with its boot HELLO (device.py, respond), on
        which the next request is the handshake; a device that does not is silent, and three silent
        rounds bring the HELLO (timing.py). A periodic HELLO would cost it a new session each time:
        a device keeps its session only for a copy of the current session's HELLO request, and
        answers it as it answered the first (counter 0), which a host cannot tell from a replay."""
        pc = self.pc
        return (
            self.auth is None
            and pc.polling
            and not pc.hello_due
            and not self.outstanding
            and not self.need_subscribe
            and now_s - self._last_hello_s >= self.poll_cfg.hello_interval
        )

    def on_bad_frame(self, code: int) -> None:
        self.dc["crc_errors" if code == wire.E_CRC else "bad_frames"] += 1
        self.dirty = True

    # -- frames in -----------------------------------------------------------------------

    def receive(self, data: bytes, now_s: float, rx_us: int) -> bool:
        """Feed one received frame as bytes: decoded, authenticated, then on_frame(). Returns True
        when it answers the outstanding request. A bad frame raises its WireError (the I/O layer
        counts it with on_bad_frame and treats it as a transport error); an authentication reject
        is counted and ignored (False): the real answer may still come, or the timeout."""
        f = codec.decode(data)  # WireError: the caller counts it
        if self.auth is not None or f.flags != data[1] >> 4:
            code = self.admit(data)
            if code == core_auth.HINT and self.outstanding:
                # a boot HELLO: the device restarted and refuses our session; stop waiting for the
                # answer to the outstanding request (none will come): the handshake goes out now
                self.outstanding = 0
                self.next_delay = 0.0
                return True
            if code:
                return False
        return self.on_frame(f, len(data), now_s, rx_us)

    def on_frame(self, f: codec.Frame, nbytes: int, now_s: float, rx_us: int) -> bool:
        """Feed one received frame (decoded, authenticated). Returns True when it answers the
        outstanding request."""
        t = f.type
        try:
            if t == wire.NOTIFY:
                self._on_notify(f, nbytes, rx_us)
                return False
            if t == wire.ACK:
                return self._on_ack(f)
            if t == wire.CLOSE:
                self._on_close(f)
                return False
            if t == wire.ERROR:
                code, text = messages.decode_error(f)
                self.dc["error_frames"] += 1
                self.dirty = True
                self.log.append(("device_error", {"code": code, "text": text}))
                return False
            if t not in (wire.EVENTS, wire.NO_EVENT, wire.RECOVERY, wire.HELLO) or (
                t == wire.HELLO and not f.payload
            ):
                self.on_bad_frame(wire.E_TYPE)  # a host->device type sent to us
                return False
            pc = self.pc
            copies = self.copies
            copies.on_frame(f.message_id, f.index)
            if copies.off_reason is not None:  # the device answers copies too: no more of them
                self.log.append(("poll_copies_off", copies.off_reason))
                copies.off_reason = None
            if t != wire.HELLO or f.message_id == pc.tag:  # (a boot HELLO answers no request)
                # the first frame of an answer: its round trip, from the send or the frame before
                if self.rtt.on_answer(f.message_id, now_s, self._last_rx_s) is not None:
                    self._probed = False
            self._last_rx_s = now_s
            old_epoch = pc.epoch
            kind, data = pc.on_frame(f)
            if kind == core.STALE:
                return self._on_stale(f, rx_us)
            if kind == core.EVENTS:
                return self._on_events(f, data, old_epoch, now_s, rx_us)
            return self._on_answer(kind, data, old_epoch, now_s, rx_us)
        except wire.WireError as e:
            self.on_bad_frame(e.code)
            return False

    def _on_stale(self, f: codec.Frame, rx_us: int) -> bool:
        """A late or duplicated answer (its tag or range does not fit): still an arrival. True when
        it shows that the outstanding POLL's answer cannot come whole (poll again at once)."""
        pc = self.pc
        t = f.type
        self.dc["stale_answers"] += 1
        self.dirty = True
        if t == wire.EVENTS:
            self._stale_events(f, rx_us)
            if u32.lt(u32.succ(pc.n), f.seq) and f.message_id in (pc.tag, pc.prev_tag):
                # a frame past s(n) in the burst asked for last (or the pipelined one before it):
                # one before it was lost (in order on the links served) or a pipelined burst
                # mispredicted. It arms the tail-loss probe (timing._arm); a timeout does not, nor
                # a late answer to a request sent again since: a loaded host's late answers (a
                # RECOVERY's burst going on from n0) are past s(n) with no datagram lost, and
                # would arm the probe on a clean link, whose short wait then fires spuriously
                self._loss_send = self.rtt.sends
                self.copies.on_gap(pc.n)
            if (
                f.message_id == pc.prev_tag
                and self.outstanding == REQ_POLL
                and pc.held
                and self._early_gap != pc.n
                and u32.lt(u32.succ(pc.n), f.seq)
            ):
                # a frame of the burst before the outstanding pipelined POLL went missing
                # (this one was held: leadwire.hold): the gap's events will be gone before
                # that POLL's answer shows it. Ask for the gap now (two in flight: the
                # pipelined POLL's answer is still taken or held when it comes)
                self._early_gap = pc.n
                self._early_gap_next = pc.tag  # the pipelined POLL whose burst goes on after the gap
                self.early_gaps += 1
                pc.ask_gap()  # just the gap: the pipelined POLL asks for what follows
                self.outstanding = 0
                self.next_delay = 0.0
                return True
            if self._third_poll(f):
                return True
        if (
            f.message_id == pc.tag
            and pc.burst_done
            and self.outstanding == REQ_POLL
            and (t == wire.EVENTS or pc.repoll or pc.n != pc.poll_n)
        ):
            # a frame of the current burst went missing, or the burst before a pipelined
            # POLL did not end where predicted, or n moved on while the POLL was out (held
            # frames of an earlier burst were taken): poll again from n at once
            self.outstanding = 0
            self.next_delay = 0.0
            return True
        return False

    def _third_poll(self, f: codec.Frame) -> bool:
        """After an early gap repoll, the pipelined POLL's burst arrives held behind the gap: the
        POLL from that burst's end goes out as soon as the held frames tell it (leadwire.hold's
        ahead_past_gap: three in flight), so the device is not left a round trip without a request
        while its ring fills after answering the gap. True: send now. (PollConfig.rules
        "third_poll"; tests/bridge/test_lossy_sim.py measures it.)"""
        if (
            "third_poll" not in self.poll_cfg.rules
            or self._early_gap != self.pc.n
            or self.outstanding != REQ_POLL
            or f.message_id != self._early_gap_next  # a frame of the burst after the gap's
            or not self.pc.ahead_past_gap(self.poll_cfg.frames)
        ):
            return False
        self.third_polls += 1
        self.outstanding = 0
        self.next_delay = 0.0
        return True

    def _on_events(self, f: codec.Frame, data: Any, old_epoch: int | None, now_s: float, rx_us: int) -> bool:
        """Events taken in order (this frame's, or held frames a gap fill or a RECOVERY released).
        True when the burst answering the outstanding POLL is complete."""
        pc = self.pc
        t = f.type
        overrun = pc.take_gap_losses()
        if overrun:
            # an overrun RECOVERY that took held frames (leadwire.hold): the gaps between them
            # were lost, and what was overwritten after them; the loss rows first
            for cl in overrun:
                self._on_loss(cl, old_epoch, rx_us)
        self._saw_newest(u32.add(pc.n, pc.backlog), now_s)
        if len(pc.taken) > 1 or t != wire.EVENTS:  # held frames taken after this one filled
            # their gap, or by a RECOVERY that showed the gaps before them overwritten
            for hf, evs in pc.taken:
                self._events(hf, evs, rx_us)
        else:
            self._events(f, data, rx_us)
        self._sync_loss(rx_us)
        self.dirty = True
        self._burst_events += len(data)
        if f.message_id != pc.tag or self.outstanding != REQ_POLL:
            # a burst already answered: a pipelined POLL (or, when one was due, a SUBSCRIBE,
            # which takes no tag from PollClient) went out after its first frame
            return False
        if not pc.burst_done:
            return False  # more frames of this burst are on their way
        self.outstanding = 0
        self.dc["round_trips"] += 1
        # the whole burst counts: full when every frame asked for came back full
        got = self._burst_events
        self._adapt(now_s, got, pc.backlog, full=got >= self.poll_cfg.batch * pc.max_frames)
        if overrun:
            self.next_delay = 0.0  # the ring overran: poll again now
        return True

    def _on_answer(self, kind: int, data: Any, old_epoch: int | None, now_s: float, rx_us: int) -> bool:
        """A one-frame answer to the outstanding request: AHEAD, NO_EVENT, RECOVERY or HELLO; or
        the RECOVERY starting a burst that goes on with the events from n0 (PollClient.follow):
        False then, the burst's EVENTS frames end it."""
        pc = self.pc
        self.dirty = True
        if kind == core.RECOVER:
            self._saw_newest(data.n1, now_s)
            self._on_loss(data, old_epoch, rx_us)
            self.next_delay = 0.0
            if not pc.burst_done:
                return False  # the events from n0 follow in this burst
        self.outstanding = 0
        self.dc["round_trips"] += 1
        if kind == AHEAD:
            # an overrun's recovery started past the device's newest event (leadwire.hold): our
            # POLL got there before the device did; poll again now
            self._saw_newest(data, now_s)
            r = self.recovery
            if r is not None and r.lost != r.counted:
                self._sync_loss(rx_us)  # what it generated since is counted lost now
            # when the device should get there at its rate (the rate falls with every answer that
            # shows no progress: a device that stopped is polled at polling.interval_max)
            gen = self._gen_rate
            imax = self.poll_cfg.interval_max
            self.next_delay = min(imax, pc.unproven / gen) if gen > 0 else imax
        elif kind == core.NOTHING:
            r = self.recovery
            if r is not None and r.lost != r.counted:
                self._sync_loss(rx_us)  # the skip past the newest shown generated (leadwire.hold)
            # a pipelined POLL found nothing new: the burst before it drained the ring, and its
            # events (counted since that POLL went out) are what this answer tells, not "idle"
            got = self._burst_events if pc.poll_pipelined else 0
            self._adapt(now_s, got, 0, full=False)
        elif kind == core.HELLO:
            self._on_hello(data, old_epoch, now_s, rx_us)
            self.next_delay = 0.0
        return True

    # -- spec 004 results ----------------------------------------------------------------

    def _sync_loss(self, rx_us: int) -> None:
        """The open recovery's row again (the core moved it on): the counters follow its lost count
        (events skipped past the device's newest, shown generated or taken back: leadwire.hold), and
        an ended phase gets its end time."""
        r = self.recovery
        if r is None:
            return
        if r.lost is not None and r.counted is not None and r.lost != r.counted:
            self.dc["overrun_lost"] += r.lost - r.counted
            r.counted = r.lost
        if r.ended:
            r.ended_us = rx_us
            self.recovery = None
            self.log.append(("recovery_done", {"n1": r.n1, "recovered": r.recovered}))
        self.out_losses.append(r)

    def _on_loss(self, cl: Loss, old_epoch: int | None, rx_us: int) -> None:
        self._sync_loss(rx_us)  # a new case 3 ends the phase before it (PollClient marked it)
        if self.recovery is not None:  # ended without PollClient saying so: close it here
            self.recovery.ended_us = rx_us
            self.out_losses.append(self.recovery)
            self.recovery = None
        if old_epoch is not None and cl.epoch != old_epoch:
            self._new_boot(old_epoch, "recovery")
        self.loss_seq += 1
        cl.seq = self.loss_seq
        cl.started_us = rx_us
        cl.counted = cl.lost
        self.recovery = cl
        self.out_losses.append(cl)
        self.dc["recoveries"] += 1
        if cl.cause == core.OVERRUN:
            self.dc["overruns"] += 1
            self.dc["overrun_lost"] += cl.lost
        self.log.append(
            ("recovery", {"cause": cl.cause, "client_n": cl.client_n, "n0": cl.n0, "n1": cl.n1,
                          "lost": cl.lost, "skipped": cl.skipped})
        )  # fmt: skip

    def _new_boot(self, old_epoch: int, by: str) -> None:
        """The device restarted: a new sender for lead, no push session, a boots row to write."""
        self.dc["restarts"] += 1
        self.lead.reset(self.device_id)
        self.lead_last = None
        self._end_sessions()
        if by == "recovery":
            self._boot_by_recovery = self.pc.epoch
            self.pc.ask_hello()  # the new boot's HELLO fills its boots row
        self.log.append(("restart", {"previous": old_epoch, "boot_epoch": self.pc.epoch, "detected_by": by}))

    def _on_hello(self, h: messages.Hello, old_epoch: int | None, now_s: float, rx_us: int) -> None:
        self._last_hello_s = now_s
        self.capacity = h.capacity
        if old_epoch is not None and h.boot_epoch != old_epoch:
            self._new_boot(old_epoch, "hello")
        self._sync_loss(rx_us)
        self.boots = h.boots
        self.firmware = h.firmware
        self.board = h.board
        self.board_id = h.board_id
        if h.boot_epoch != self._booted:
            by = "recovery" if self._boot_by_recovery == h.boot_epoch else "hello"
            self.out_boots.append(Boot(h.boot_epoch, h.boots, h.firmware, h.board, rx_us, by))
            self._booted = h.boot_epoch
            self.log.append(("boot", {"boot_epoch": h.boot_epoch, "boots": h.boots, "detected_by": by}))
        self._boot_by_recovery = None
