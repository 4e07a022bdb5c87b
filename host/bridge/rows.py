"""The bridge client's outputs: arrival rows, loss and boot rows, counters (part of DeviceClient).

One concern of :class:`~leadwire.bridge.client.DeviceClient` in its own module (a mixin, as
:mod:`~leadwire.bridge.timing`): what the store drains in one transaction with ``snapshot()`` --
arrival rows as segments in arrival order (``SEG_EVENT``: first arrivals of polled events, the
short row; ``SEG_ARRIVAL``: every other arrival, all columns), ``out_losses``, ``out_boots``,
``out_acks`` -- and the device and channel counters. First arrivals of a batch are built column-wise
(no per-event loop body); a late or duplicated answer's events at or before n are logged as
duplicate arrivals, never stored twice.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from itertools import repeat
from typing import TYPE_CHECKING, Any

from leadwire import client as core
from leadwire import codec, messages, u32, wire

if TYPE_CHECKING:
    from .client import Boot, ClientState, Loss

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
    "auth_forged",
    "auth_replayed",
    "auth_unsigned",
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

# kinds of row segments in out_segments (store.Batch): first arrivals of polled events (the short
# row of store._INSERT_EVENTS), and every other arrival (all columns, store._INSERT_ARRIVALS)
SEG_EVENT = 0
SEG_ARRIVAL = 1

_COUNTERS_JSON = '{"device":{%s},"channels":{%%s}}' % ",".join('"%s":%%d' % k for k in DEVICE_COUNTERS)
_CHANNEL_JSON = '"%%d":{%s}' % ",".join('"%s":%%d' % k for k in CHANNEL_COUNTERS)

# frame_bytes - payload of the one record of a one-event batch (_events: record head + frame overhead)
_EXTRA_ONE = wire.RECORD_HEAD + wire.OVERHEAD + wire.BATCH_HEAD

TS_MIN_US = 946_684_800_000_000  # 2000-01-01: a prefix timestamp outside [2000, 2100) is ignored
TS_MAX_US = 4_102_444_800_000_000


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


class Rows:
    """The outputs and counters half of DeviceClient (see the module docstring)."""

    if TYPE_CHECKING:  # the client's state these use
        pc: Any
        lead: Any
        device_id: str
        dev_key: int
        boots: int
        arrival: int
        lead_last: int | None
        loss_seq: int
        session: int
        firmware: str
        board: str
        board_id: str
        deliver: bool
        ts_prefix: bool
        recovery: Loss | None

    def _init_outputs(self, st: ClientState) -> None:
        """Counters (resumed from the stored state) and the outputs the store drains."""
        # counters
        c = st.counters or {}
        self.dc: dict[str, int] = {k: int(c.get("device", {}).get(k, 0)) for k in DEVICE_COUNTERS}
        self.cc: dict[int, list[int]] = {
            int(ch): [int(v.get(name, 0)) for name in CHANNEL_COUNTERS]
            for ch, v in c.get("channels", {}).items()
        }
        # outputs, drained by the store in one transaction with snapshot(): arrival rows as
        # segments [(SEG_EVENT | SEG_ARRIVAL, rows)] in arrival order
        self.out_segments: list[tuple[int, list[tuple[Any, ...]]]] = []
        self.out_rows = 0  # rows in out_segments
        self.out_event_rows = 0  # of which first arrivals of events
        self.out_losses: list[Loss] = []
        self.out_boots: list[Boot] = []
        self.out_acks: list[bytes] = []  # sent only after the transaction holding the report commits
        self.out_deliveries: list[tuple[Delivery, int]] = []
        self.log: list[tuple[str, dict[str, Any]]] = []  # structured log records for the I/O layer
        self.dirty = False
        # the devices row last drained (row_state()) and when: a change of the counters alone is
        # written at most every store.COUNTERS_EVERY (store.drain), pending until then
        self.row_written: tuple[Any, ...] | None = None
        self.row_at = float("-inf")
        self.row_pending = False

    @property
    def out_arrivals(self) -> list[tuple[Any, ...]]:
        """Pending arrival rows, every kind, as full rows in store.ARRIVAL_COLUMNS order."""
        out: list[tuple[Any, ...]] = []
        for kind, rows in self.out_segments:
            if kind == SEG_ARRIVAL:
                out.extend(rows)
                continue
            for dev, arrival, epoch, boots, ch, seq, lead, prio, extra, gen, rx, data in rows:
                out.append((dev, arrival, 0, epoch, boots, ch, 0, EVENT_LEAD_CHANNEL, seq, lead, False, False,
                            prio, len(data), len(data) + extra, gen, rx, data))  # fmt: skip
        return out

    @property
    def out_events(self) -> list[tuple[Any, ...]]:
        """Pending first arrivals of events: (dev, boot_epoch, offset, channel, priority, data, arrival)."""
        rows = self.out_arrivals
        return [(a[0], a[3], a[8], a[5], a[12], a[17], a[1]) for a in rows if a[2] == 0 and not a[10]]

    @property
    def out_reports(self) -> list[tuple[Any, ...]]:
        """Pending first arrivals of reports: (dev, boot_epoch, channel, session, number, priority, data,
        arrival)."""
        rows = self.out_arrivals
        return [(a[0], a[3], a[5], a[6], a[8], a[12], a[17], a[1]) for a in rows if a[2] == 1 and not a[10]]

    def clear_outputs(self) -> None:
        """Forget the pending rows, losses and boots (benchmarks and simulations without a store)."""
        self.out_segments = []
        self.out_rows = self.out_event_rows = 0
        self.out_losses = []
        self.out_boots = []

    def _events(self, f: codec.Frame, evs: list[tuple[int, int, bytes]], rx_us: int) -> None:
        """First arrivals of a batch of events: rows built column-wise (zip in C, no per-event loop
        body); lead from the core's LeadTracker for every event. A batch of one (a slow device's
        answer) is one row built directly: the column-wise build costs more than it saves there."""
        n = len(evs)
        if n == 1:
            self._event(f, evs[0], rx_us)
            return
        offs, chs, datas = zip(*evs, strict=True)
        lead_of = self.lead.lead
        sender = self.device_id
        # the offsets of a batch are consecutive (the core numbers them from the frame's seq): when the
        # first one leads (>= 1), every next one has lead 1 and the tracker ends at the last one, so
        # two calls instead of one per event; a late first one (lead <= 0) left the tracker as it was
        first = lead_of(sender, EVENT_LEAD_CHANNEL, offs[0])
        if first >= 1:
            leads = [1] * n
            leads[0] = first
            if n > 1:
                lead_of(sender, EVENT_LEAD_CHANNEL, offs[-1])
        else:
            leads = [first] + [lead_of(sender, EVENT_LEAD_CHANNEL, off) for off in offs[1:]]
        a0 = self.arrival
        self.arrival = a0 + n
        # frame_bytes = record (3 + data) + the frame's overhead on the first record of the batch
        extra = [wire.RECORD_HEAD] * n
        extra[0] += wire.OVERHEAD + wire.BATCH_HEAD
        if self.ts_prefix:
            gens: Any = [
                g if TS_MIN_US <= g < TS_MAX_US else None
                for g in [int.from_bytes(d[:8], "big") for d in datas]
            ]
        else:
            gens = repeat(None)
        self._rows(SEG_EVENT).extend(
            zip(repeat(self.dev_key), range(a0 + 1, a0 + n + 1), repeat(self.pc.epoch), repeat(self.boots),
                chs, offs, leads, repeat(f.priority), extra, gens, repeat(rx_us), datas)
        )  # fmt: skip
        self.out_rows += n
        self.out_event_rows += n
        cc = self.cc
        for ch, k in Counter(chs).items() if n > 16 else zip(chs, repeat(1)):
            c = cc.get(ch)
            if c is None:
                c = cc[ch] = [0, 0, 0, 0, 0]
            c[C_RECEIVED] += k
        if max(leads) > 1:
            for ch, lead in zip(chs, leads, strict=True):
                if lead > 1:
                    cc[ch][C_GAPS] += 1
        if self.deliver:
            prio = f.priority
            self.out_deliveries.extend(
                (Delivery(KIND_EVENT, ch, off, data, prio, False, False, 0, rx_us), lead)
                for off, ch, data, lead in zip(offs, chs, datas, leads, strict=True)
            )
        self.lead_last = self.lead.last(sender, EVENT_LEAD_CHANNEL)
        self.dc["events_stored"] += n

    def _event(self, f: codec.Frame, ev: tuple[int, int, bytes], rx_us: int) -> None:
        """_events() of a batch of one event: the same row, counters and delivery."""
        off, ch, data = ev
        sender = self.device_id
        lead = self.lead.lead(sender, EVENT_LEAD_CHANNEL, off)
        self.arrival = a = self.arrival + 1
        gen = None
        if self.ts_prefix:
            g = int.from_bytes(data[:8], "big")
            if TS_MIN_US <= g < TS_MAX_US:
                gen = g
        self._rows(SEG_EVENT).append(
            (self.dev_key, a, self.pc.epoch, self.boots, ch, off, lead, f.priority, _EXTRA_ONE, gen, rx_us,
             data)
        )  # fmt: skip
        self.out_rows += 1
        self.out_event_rows += 1
        c = self.cc.get(ch)
        if c is None:
            c = self.cc[ch] = [0, 0, 0, 0, 0]
        c[C_RECEIVED] += 1
        if lead > 1:
            c[C_GAPS] += 1
        if self.deliver:
            self.out_deliveries.append(
                (Delivery(KIND_EVENT, ch, off, data, f.priority, False, False, 0, rx_us), lead)
            )
        self.lead_last = self.lead.last(sender, EVENT_LEAD_CHANNEL)
        self.dc["events_stored"] += 1

    def _rows(self, kind: int) -> list[tuple[Any, ...]]:
        """The row list to append arrivals of this kind to (arrival order is kept across kinds)."""
        segs = self.out_segments
        if segs and segs[-1][0] == kind:
            rows = segs[-1][1]
        else:
            rows = []
            segs.append((kind, rows))
        return rows

    def _arrival(self, row: tuple[Any, ...]) -> None:
        self._rows(SEG_ARRIVAL).append(row)
        self.out_rows += 1

    def _stale_events(self, f: codec.Frame, rx_us: int) -> None:
        """Log the records of a late/duplicated EVENTS answer that we already have (duplicates).

        Records after n are not logged: they are polled (and logged) again in order.
        """
        pc = self.pc
        if pc.fresh or pc.epoch is None:
            return
        _, records = messages.decode_records(f.payload)
        j = u32.diff(pc.n, f.seq) + 1  # records at or before n
        if j <= 0:
            return
        lost = self.recovery if self.recovery is not None and self.recovery.cause == core.OVERRUN else None
        sender = self.device_id
        off = f.seq
        for i in range(min(j, len(records))):
            ch, data = records[i]
            if lost is not None and u32.lt(lost.client_n, off) and u32.lt(off, lost.n0):
                off = u32.succ(off)  # counted lost in the open recovery: not a duplicate of anything
                continue
            lead = self.lead.lead(sender, EVENT_LEAD_CHANNEL, off)
            self.arrival += 1
            c = self.cc.get(ch)
            if c is None:
                c = self.cc[ch] = [0, 0, 0, 0, 0]
            c[C_RECEIVED] += 1
            c[C_DUPLICATES] += 1
            plen = len(data)
            self._arrival(
                (self.dev_key, self.arrival, 0, pc.epoch, self.boots, ch, 0, EVENT_LEAD_CHANNEL, off, lead,
                 True, False, f.priority, plen, wire.RECORD_HEAD + plen, None, rx_us, None)
            )  # fmt: skip
            if self.deliver:
                self.out_deliveries.append(
                    (Delivery(KIND_EVENT, ch, off, data, f.priority, True, False, 0, rx_us), lead)
                )
            off = u32.succ(off)

    def counters_json(self) -> str:
        """The counters as compact JSON: the same text json.dumps gives (tested), made with two
        format strings because every commit writes it for every device that changed."""
        dc = self.dc
        if len(dc) != len(DEVICE_COUNTERS):  # not the fixed layout: the general way
            return json.dumps(
                {"device": dc, "channels": {str(ch): dict(zip(CHANNEL_COUNTERS, v, strict=True))
                                            for ch, v in self.cc.items()}},
                separators=(",", ":"),
            )  # fmt: skip
        chans = ",".join([_CHANNEL_JSON % (ch, *v) for ch, v in self.cc.items()])
        return _COUNTERS_JSON % (*[dc[k] for k in DEVICE_COUNTERS], chans)

    def row_state(self) -> tuple[Any, ...]:
        """The devices row without its counters: what must reach the store in the transaction that
        holds the rows it goes with (the offset n, the epoch, the arrival counter ...)."""
        pc = self.pc
        return (
            pc.n,
            int(not pc.fresh),
            pc.epoch,
            self.boots,
            self.lead_last,
            self.arrival,
            self.loss_seq,
            self.session,
            self.firmware,
            self.board,
            self.board_id,
        )

    def snapshot(self, state: tuple[Any, ...] | None = None) -> tuple[Any, ...]:
        """The devices row written in the same transaction as the drained outputs (`state`: its
        row_state(), when the caller has it)."""
        return (*(state or self.row_state()), self.counters_json(), self.dev_key)
