"""The per-device client state machine: sans-I/O (no sockets, no clocks; h11 style).

The asyncio layer (daemon.py) asks :meth:`DeviceClient.request` for the next frame to send, feeds
every frame received from the device to :meth:`DeviceClient.on_frame`, and reports a missing or
broken answer with :meth:`DeviceClient.on_transport_error`. Time comes in as arguments. What the
client decides to store, it appends to its ``out_*`` lists, which the store drains in one
transaction together with :meth:`DeviceClient.snapshot` (the client offset n and the counters).

The client offset n follows spec 004's client table (docs/protocol.md, "Polling with offsets"):

======================  ===========================================================================
answer to POLL(n)       what the client does
======================  ===========================================================================
EVENTS from s(n)        case 1: store the batch, n = its last offset, poll again (now if backlog)
NO_EVENT(n)             case 2: nothing new, poll n again later
RECOVERY(n0, n1)        case 3: ask HELLO to classify (boot epoch changed: restart; never had an
                        event: first contact; else overrun with exactly (n0 - s(n)) mod 2^32 lost),
                        record the loss, set n = n0 - 1 and consume n0..n1 (the recovery phase)
no answer / bad frame   transport error: poll n again after a bounded exponential backoff
======================  ===========================================================================

Answers that do not answer the outstanding poll (a late or duplicated datagram) are still
arrivals: their events are logged with their lead (spec 000) and ``duplicate`` set, never stored
twice. Every protocol detail (layouts, CRC, u32 arithmetic, lead) comes from the leadwire core.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from leadwire import codec, frames, messages, u32, wire
from leadwire.lead import LeadTracker
from leadwire.reassembly import Reassembler

from .config import DeviceConfig, PollConfig

# request kinds
REQ_HELLO = 1
REQ_SUBSCRIBE = 2
REQ_POLL = 3

KIND_EVENT = "event"
KIND_REPORT = "report"
EVENT_LEAD_CHANNEL = -1  # all channels of a device share its one ring of offsets

# per-channel counters (index into the list kept per channel)
C_RECEIVED = 0
C_DUPLICATES = 1
C_LATE = 2
C_GAPS = 3
C_RETRANSMISSIONS = 4
CHANNEL_COUNTERS = ("received", "duplicates", "late", "gaps", "retransmissions")

DEVICE_COUNTERS = (
    "polls",
    "round_trips",
    "timeouts",
    "crc_errors",
    "bad_frames",
    "auth_failures",
    "overruns",
    "overrun_lost",
    "restarts",
    "recoveries",
    "stale_answers",
    "events_stored",
    "reports_stored",
    "acks_sent",
    "error_frames",
    "unsolicited",
)

TS_MIN_US = 946_684_800_000_000  # 2000-01-01: a prefix timestamp outside [2000, 2100) is ignored
TS_MAX_US = 4_102_444_800_000_000


@dataclass
class Loss:
    """One recovery phase (spec 004 case 3) the client acted on; a row of the losses table."""

    seq: int  # per-device number of this recovery
    boot_epoch: int
    client_n: int
    n0: int
    n1: int
    lost: int | None
    cause: str  # "overrun" | "restart" | "first_contact"
    started_us: int
    ended_us: int | None = None
    recovered: int = 0


@dataclass
class Boot:
    boot_epoch: int
    boots: int
    firmware: str
    board: str
    first_seen_us: int
    detected_by: str  # "hello" | "recovery"


@dataclass
class Delivery:
    """A message handed to subscribe()/subscribe_ordered() callbacks."""

    kind: str  # "event" | "report"
    channel: int
    seq: int  # offset (events) or MessageNumber (reports)
    data: bytes
    priority: int
    duplicate: bool
    retransmission: bool
    session: int
    rx_us: int


@dataclass
class ClientState:
    """What the store keeps per device between runs (loaded into a new DeviceClient)."""

    n: int = 0
    has_n: bool = False  # an event was ever received (spec 004: otherwise n is 0)
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


class DeviceClient:
    def __init__(
        self,
        dev_key: int,
        cfg: DeviceConfig,
        poll: PollConfig,
        state: ClientState | None = None,
        deliver: bool = False,
    ) -> None:
        st = state or ClientState()
        self.dev_key = dev_key
        self.device_id = cfg.id
        self.cfg = cfg
        self.poll_cfg = poll
        self.deliver = deliver  # build Delivery objects for subscription callbacks
        self.ts_prefix = cfg.timestamp == "prefix_us"
        # spec 004 client state
        self.n = st.n
        self.has_n = st.has_n
        self.epoch: int | None = st.boot_epoch
        self.boots = st.boots
        self.arrival = st.arrival
        self.loss_seq = st.loss_seq
        self.session = st.session
        self.firmware = st.firmware
        self.board = st.board
        self.board_id = st.board_id
        self.capacity = 0
        self.recovery: Loss | None = st.recovery
        self._pending_recovery: tuple[int, int, int, int] | None = None  # n0, n1, client_n, rx_us
        self._restart_pending = False  # a HELLO showed a new boot epoch: the next case 3 is a restart
        self.lead = LeadTracker()
        if self.epoch is not None and st.lead_last is not None:
            self.lead.lead(self.device_id, EVENT_LEAD_CHANNEL, st.lead_last)  # seeds last_seq
        self.lead_last = st.lead_last
        # requests
        self.need_hello = True
        self.need_subscribe = bool(cfg.subscribe)
        self.sub_channels: dict[int, int] = {}  # channel -> session, for reports
        self.outstanding = 0
        self._last_hello_s = -1e18
        self._timeouts = 0
        # adaptive polling
        self.interval = poll.interval
        self.next_delay = 0.0
        self._rate = 0.0  # events per second, EWMA
        self._last_answer_s: float | None = None
        # push sessions
        self.reasm = Reassembler(max_messages=16, max_bytes=65536)
        self._msg_meta: dict[int, list[int]] = {}  # message id -> [MessageNumber, channel, frame bytes]
        # counters
        c = st.counters or {}
        self.dc: dict[str, int] = {k: int(c.get("device", {}).get(k, 0)) for k in DEVICE_COUNTERS}
        self.cc: dict[int, list[int]] = {
            int(ch): [int(v.get(name, 0)) for name in CHANNEL_COUNTERS]
            for ch, v in c.get("channels", {}).items()
        }
        # outputs, drained by the store in one transaction with snapshot()
        self.out_events: list[tuple[Any, ...]] = []
        self.out_reports: list[tuple[Any, ...]] = []
        self.out_arrivals: list[tuple[Any, ...]] = []
        self.out_losses: list[Loss] = []
        self.out_boots: list[Boot] = []
        self.out_acks: list[bytes] = []  # sent only after the transaction holding the report commits
        self.out_deliveries: list[tuple[Delivery, int]] = []
        self.log: list[tuple[str, dict[str, Any]]] = []  # structured log records for the I/O layer
        self.dirty = False

    # -- requests ------------------------------------------------------------------------

    def request(self, now_s: float) -> codec.Frame:
        """The next frame to send (HELLO, SUBSCRIBE or POLL(n)); it becomes the outstanding request."""
        if (
            self.need_hello
            or self._pending_recovery is not None
            or now_s - self._last_hello_s >= self.poll_cfg.hello_interval
        ):
            self.outstanding = REQ_HELLO
            return messages.hello_request()
        if self.need_subscribe:
            self.outstanding = REQ_SUBSCRIBE
            self.session += 1
            self.sub_channels = {ch: self.session for ch in self.cfg.subscribe}
            self.dirty = True
            return messages.subscribe_frame(self.cfg.subscribe)
        self.outstanding = REQ_POLL
        self.dc["polls"] += 1
        return messages.poll_frame(self.n, self.poll_cfg.batch, self.poll_cfg.max_bytes)

    def on_transport_error(self) -> float:
        """No answer in time (or a broken one): the same request again after the returned delay."""
        self._timeouts += 1
        self.dc["timeouts"] += 1
        self.outstanding = 0
        if self._timeouts >= 3:
            self.need_hello = True  # the device may have restarted while silent
        delay = min(
            self.poll_cfg.backoff_max, self.poll_cfg.timeout * 0.5 * (2 ** min(self._timeouts - 1, 20))
        )
        self.next_delay = delay
        return delay

    def on_bad_frame(self, code: int) -> None:
        if code == wire.E_CRC:
            self.dc["crc_errors"] += 1
        else:
            self.dc["bad_frames"] += 1
        self.dirty = True

    # -- frames in -----------------------------------------------------------------------

    def on_frame(self, f: codec.Frame, nbytes: int, now_s: float, rx_us: int) -> bool:
        """Feed one received frame. Returns True when it answers the outstanding request."""
        t = f.type
        try:
            if t == wire.EVENTS:
                return self._on_events(f, nbytes, now_s, rx_us)
            if t == wire.NO_EVENT:
                return self._on_no_event(f, now_s)
            if t == wire.RECOVERY:
                return self._on_recovery(f, now_s, rx_us)
            if t == wire.HELLO:
                return self._on_hello(f, now_s, rx_us)
            if t == wire.NOTIFY:
                self._on_notify(f, nbytes, rx_us)
                return False
            if t == wire.ACK:
                return self._on_ack(f)
            if t == wire.CLOSE:
                self.reasm.feed(frames.Frame(f.message_id, 0, True, f.priority, b"", True))
                self._msg_meta.clear()
                self.sub_channels.pop(f.channel, None)
                self.log.append(("session_closed", {"channel": f.channel}))
                return False
            if t == wire.ERROR:
                code, text = messages.decode_error(f)
                self.dc["error_frames"] += 1
                self.dirty = True
                self.log.append(("device_error", {"code": code, "text": text}))
                return False
        except wire.WireError as e:
            self.on_bad_frame(e.code)
            return False
        self.dc["bad_frames"] += 1  # a host->device type (POLL, SUBSCRIBE) sent to us
        self.dirty = True
        return False

    def _answered(self, now_s: float) -> None:
        self._timeouts = 0
        self.outstanding = 0
        self.dc["round_trips"] += 1
        self.dirty = True

    # -- spec 004: poll answers ----------------------------------------------------------

    def _on_events(self, f: codec.Frame, nbytes: int, now_s: float, rx_us: int) -> bool:
        backlog, records = messages.decode_records(f.payload)
        k = len(records)
        if self.epoch is None or k == 0:
            self.dc["stale_answers"] += 1  # no HELLO yet (cannot name the sender), or empty
            self.dirty = True
            return False
        # records hold offsets first, s(first), ...; j of them are at or before n (already had)
        j = u32.diff(self.n, f.seq) + 1
        if not (self.has_n or self.recovery is not None) and j != 0:
            j = -1  # before any event only an answer starting at s(n) can be ours
        answers = self.outstanding == REQ_POLL and 0 <= j < k
        if j < 0:
            self.dc["stale_answers"] += 1  # starts after s(n): not an answer to any poll we sent
            self.dirty = True
            return False
        take = k if answers else min(j, k)  # a late answer: log its old records, store nothing
        self._arrivals_events(f, nbytes, records, take, j, rx_us)
        if not answers:
            self.dc["stale_answers"] += 1
            return False
        self._answered(now_s)
        if self.recovery is not None:
            rec = self.recovery
            rec.recovered += k - j
            if u32.diff(self.n, rec.n1) >= 0:
                rec.ended_us = rx_us
                self.recovery = None
                self.log.append(("recovery_done", {"n1": rec.n1, "recovered": rec.recovered}))
            self.out_losses.append(rec)
        self._adapt(now_s, k - j, backlog, full=k >= self.poll_cfg.batch)
        return True

    def _arrivals_events(
        self,
        f: codec.Frame,
        nbytes: int,
        records: list[tuple[int, bytes]],
        take: int,
        start_new: int,
        rx_us: int,
    ) -> None:
        """Log records[:take] as arrivals; store those from index start_new on (after n)."""
        dev = self.dev_key
        epoch = self.epoch
        sender = self.device_id
        lead_of = self.lead.lead
        cc = self.cc
        prio = f.priority
        arrivals = self.out_arrivals
        events = self.out_events
        boots = self.boots
        deliver = self.deliver
        ts = self.ts_prefix
        share = wire.OVERHEAD + wire.BATCH_HEAD  # the first record carries the frame's overhead
        off = f.seq
        for i in range(take):
            ch, data = records[i]
            lead = lead_of(sender, EVENT_LEAD_CHANNEL, off)
            dup = i < start_new
            self.arrival += 1
            c = cc.get(ch)
            if c is None:
                c = cc[ch] = [0, 0, 0, 0, 0]
            c[0] += 1
            if dup:
                c[1] += 1
            elif lead > 1:
                c[3] += 1
            elif lead < 0:
                c[2] += 1
            gen = None
            if ts and len(data) >= 8:
                g = int.from_bytes(data[:8], "big")
                if TS_MIN_US <= g < TS_MAX_US:
                    gen = g
            plen = len(data)
            arrivals.append(
                (dev, self.arrival, 0, epoch, boots, ch, 0, EVENT_LEAD_CHANNEL, off, lead, dup, False, prio,
                 plen, wire.RECORD_HEAD + plen + share, gen, rx_us)
            )  # fmt: skip
            share = 0
            if not dup:
                events.append((dev, epoch, off, ch, prio, data, self.arrival))
                self.n = off
                self.has_n = True
            if deliver:
                self.out_deliveries.append(
                    (Delivery(KIND_EVENT, ch, off, data, prio, dup, False, 0, rx_us), lead)
                )
            off = (off + 1) & 0xFFFFFFFF
        if take:
            self.lead_last = self.lead.last(sender, EVENT_LEAD_CHANNEL)
            self.dc["events_stored"] += max(0, take - start_new)
            self.dirty = True

    def _on_no_event(self, f: codec.Frame, now_s: float) -> bool:
        if self.outstanding != REQ_POLL or f.seq != self.n:
            self.dc["stale_answers"] += 1
            self.dirty = True
            return False
        self._answered(now_s)
        self._adapt(now_s, 0, 0, full=False)
        return True

    def _on_recovery(self, f: codec.Frame, now_s: float, rx_us: int) -> bool:
        n0, n1 = messages.decode_recovery(f)
        if self.outstanding != REQ_POLL or (self.has_n and n0 == u32.succ(self.n)):
            # a device holding s(n) answers EVENTS: this is a late copy of an earlier answer
            self.dc["stale_answers"] += 1
            self.dirty = True
            return False
        self._answered(now_s)
        # classify with a fresh HELLO: a changed boot epoch is a restart (spec 004 case 3 causes)
        self._pending_recovery = (n0, n1, self.n, rx_us)
        self.next_delay = 0.0
        return True

    def _start_recovery(self, rx_us: int) -> None:
        assert self._pending_recovery is not None and self.epoch is not None
        n0, n1, client_n, started = self._pending_recovery
        self._pending_recovery = None
        if self.recovery is not None:  # a new case 3 while recovering: that phase ends here
            old = self.recovery
            old.ended_us = started
            self.out_losses.append(old)
            self.recovery = None
        if not self.has_n:
            cause = "first_contact"
            lost = None
        elif self._restart_pending:
            cause = "restart"
            lost = None
        else:
            cause = "overrun"
            lost = u32.distance(n0, u32.succ(client_n))
            self.dc["overruns"] += 1
            self.dc["overrun_lost"] += lost
        self._restart_pending = False
        self.loss_seq += 1
        rec = Loss(self.loss_seq, self.epoch, client_n, n0, n1, lost, cause, started)
        self.recovery = rec
        self.out_losses.append(rec)
        self.dc["recoveries"] += 1
        self.n = u32.pred(n0)
        self.dirty = True
        self.next_delay = 0.0
        self.log.append(
            ("recovery", {"cause": cause, "client_n": client_n, "n0": n0, "n1": n1, "lost": lost})
        )

    def _on_hello(self, f: codec.Frame, now_s: float, rx_us: int) -> bool:
        if not f.payload:
            self.dc["bad_frames"] += 1  # a HELLO request sent to the host
            return False
        h = messages.decode_hello(f)
        self._last_hello_s = now_s
        self.capacity = h.capacity
        by_recovery = self._pending_recovery is not None
        if self.epoch is None or h.boot_epoch != self.epoch:
            if self.epoch is not None:
                self.dc["restarts"] += 1
                self._restart_pending = True
                self.lead.reset(self.device_id)
                self.lead_last = None
                self.reasm = Reassembler(max_messages=16, max_bytes=65536)
                self._msg_meta.clear()
                self.sub_channels = {}
                self.need_subscribe = bool(self.cfg.subscribe)
                if self.recovery is not None:  # the old boot's recovery cannot finish
                    self.recovery.ended_us = rx_us
                    self.out_losses.append(self.recovery)
                    self.recovery = None
            self.log.append(
                ("boot", {"boot_epoch": h.boot_epoch, "boots": h.boots, "previous": self.epoch,
                          "detected_by": "recovery" if by_recovery else "hello"})
            )  # fmt: skip
            self.epoch = h.boot_epoch
            self.out_boots.append(
                Boot(
                    h.boot_epoch, h.boots, h.firmware, h.board, rx_us, "recovery" if by_recovery else "hello"
                )
            )
        self.boots = h.boots
        self.firmware = h.firmware
        self.board = h.board
        self.board_id = h.board_id
        self.dirty = True
        if self.outstanding == REQ_HELLO:
            self._answered(now_s)
            self.need_hello = False
            if self._pending_recovery is not None:
                self._start_recovery(rx_us)
            return True
        return False

    # -- spec 003: push sessions ---------------------------------------------------------

    def _on_ack(self, f: codec.Frame) -> bool:
        number, status = messages.decode_ack(f)
        if self.outstanding == REQ_SUBSCRIBE and number == 0:
            self._answered(0.0)
            if messages.is_success(status):
                self.need_subscribe = False
                self.log.append(
                    ("subscribed", {"channels": list(self.cfg.subscribe), "session": self.session})
                )
            else:
                self.log.append(("subscribe_refused", {"status": status}))
                self.next_delay = self.poll_cfg.ack_timeout
            return True
        return False

    def _on_notify(self, f: codec.Frame, nbytes: int, rx_us: int) -> None:
        if f.index == 0:
            self._msg_meta[f.message_id] = [f.seq, f.channel, 0]
        meta = self._msg_meta.get(f.message_id)
        if meta is not None:
            meta[2] += nbytes
        m = self.reasm.feed(frames.Frame(f.message_id, f.index, f.last, f.priority, f.payload))
        if m is None or m.is_close:
            return
        meta = self._msg_meta.pop(m.message_id, None)
        if meta is None:
            return
        number, ch, fbytes = meta
        self._on_report(ch, number, m.priority, m.data, fbytes, rx_us)

    def _on_report(self, ch: int, number: int, prio: int, body: bytes, fbytes: int, rx_us: int) -> None:
        session = self.sub_channels.get(ch)
        if session is None or self.epoch is None:
            self.dc["unsolicited"] += 1  # not subscribed (any more): not ours to confirm
            self.dirty = True
            return
        messages.decode_records(body)  # a report body must be a record batch (WireError if not)
        key = (ch, session)
        last = self.lead.last(self.device_id, key)
        dup = last is not None and u32.diff(number, last) <= 0
        lead = self.lead.lead(self.device_id, key, number)
        self.arrival += 1
        c = self.cc.get(ch)
        if c is None:
            c = self.cc[ch] = [0, 0, 0, 0, 0]
        c[C_RECEIVED] += 1
        if dup:
            c[C_DUPLICATES] += 1
            c[C_RETRANSMISSIONS] += 1
        elif lead > 1:
            c[C_GAPS] += 1
        self.out_arrivals.append(
            (self.dev_key, self.arrival, 1, self.epoch, self.boots, ch, session, ch, number, lead, dup, dup,
             prio, len(body), fbytes, None, rx_us)
        )  # fmt: skip
        if not dup:
            self.out_reports.append((self.dev_key, self.epoch, ch, session, number, prio, body, self.arrival))
            self.dc["reports_stored"] += 1
        # confirm only once stored (the store sends it after commit): a crash before that makes
        # the device retransmit the identical report instead of losing it (spec 003 R0801/R0802)
        self.out_acks.append(codec.encode(messages.ack_frame(number, messages.STATUS_OK, ch)))
        self.dc["acks_sent"] += 1
        if self.deliver:
            self.out_deliveries.append(
                (Delivery(KIND_REPORT, ch, number, body, prio, dup, dup, session, rx_us), lead)
            )
        self.dirty = True

    # -- adaptive polling ----------------------------------------------------------------

    def _adapt(self, now_s: float, got: int, backlog: int, full: bool) -> None:
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
            target = max(1.0, min(p.batch / 2, self.capacity / 4 if self.capacity else p.batch / 2))
            want = target / self._rate if self._rate > 0 else self.interval
            self.interval = min(p.interval_max, max(p.interval_min, want))
        self.next_delay = self.interval

    # -- state for the store -------------------------------------------------------------

    def counters_json(self) -> str:
        return json.dumps(
            {
                "device": self.dc,
                "channels": {
                    str(ch): dict(zip(CHANNEL_COUNTERS, v, strict=True)) for ch, v in self.cc.items()
                },
            },
            separators=(",", ":"),
        )

    def snapshot(self) -> tuple[Any, ...]:
        """The devices row written in the same transaction as the drained outputs."""
        return (
            self.n,
            int(self.has_n),
            self.epoch,
            self.boots,
            self.lead_last,
            self.arrival,
            self.loss_seq,
            self.session,
            self.firmware,
            self.board,
            self.board_id,
            self.counters_json(),
            self.dev_key,
        )
