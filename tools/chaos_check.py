"""The chaos run's checker: each board's own record (the unix board's ``trace`` file: every event its
ring took, byte for byte, and a boot record per ring built) against the store, read through
host/bridge/store_reader.py.

The checker (:func:`check`, :func:`check_board`) takes each board's record as ground truth. Within a
boot, offsets are consecutive from the start offset, so record i of a boot is offset start + i.
The classes are the one accounting check's (leadwire.bridge.accounting.check_boot); every generated
event is put in exactly one:

=================  =================================================================================
stored             in the store once, channel and payload byte-identical to the record
lost (counted)     inside the range of an overrun loss row (``losses``, exact count): offsets
                   s(client_n) .. client_n + lost
before contact     before n0 of the boot's first restart / first-contact loss row: events that left
                   the ring before the bridge reached this boot. The row exists (the loss is not
                   silent) but its count is unknowable to the host (lost NULL); the record counts it
died with boot     after the last event of the boot the bridge stored or counted, in a boot ended
                   by a power cut: still in the ring when the power went; only the record knows them
SILENT             anything else: missing with no loss row covering it (fails the run)
=================  =================================================================================

It also fails the run on: a stored event whose bytes differ from the record (corrupted), an event
stored twice (duplicate), a stored event or boot the board never generated (phantom), a loss row
overlapping a stored event or another loss row (double accounting), a boot of the record the store
has no boots row for (undetected restart), a boots row whose boot count differs from the record.
"""

from __future__ import annotations

from array import array
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from leadwire.bridge.accounting import Ledger, check_boot
from leadwire.bridge.store_reader import LossRow, StoreReader
from leadwire.tools.testbed import M32
from leadwire.tools.testbed import format_table as _table

BOOT_MARK = 0xFFFF  # the length field of a boot record in a trace (no event is that long)
BOOT_SIZE = 17  # 0x00, 0xFFFF, epoch u32, start u32, boots u32, ring capacity u16


class TraceBoot:
    """One boot as the board recorded it: record i is the event at offset start + i (mod 2^32)."""

    def __init__(self, epoch: int, start: int, boots: int, capacity: int = 0) -> None:
        self.epoch = epoch
        self.start = start
        self.boots = boots
        self.capacity = capacity
        self.blob = bytearray()  # the records as written: channel u8, length u16, data
        self.pos = array("Q")  # where record i starts in blob

    def __len__(self) -> int:
        return len(self.pos)

    def record(self, i: int) -> tuple[int, bytes]:
        p = self.pos[i]
        b = self.blob
        n = (b[p + 1] << 8) | b[p + 2]
        return b[p], bytes(b[p + 3 : p + 3 + n])

    def offset(self, i: int) -> int:
        return (self.start + i) & M32

    def rel(self, offset: int) -> int:
        """Index of an offset in this boot (may be >= len: not generated)."""
        return (offset - self.start) & M32


class Trace:
    """A board's trace file, read incrementally (the board appends to it while we read)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.boots: list[TraceBoot] = []
        self._read = 0  # bytes of the file consumed
        self._tail = b""  # an incomplete record at the end of the file
        self.events = 0

    def update(self) -> int:
        """Parse what was appended since the last call; returns the events seen so far."""
        try:
            with self.path.open("rb") as f:
                f.seek(self._read)
                new = f.read()
        except FileNotFoundError:
            return self.events
        self._read += len(new)
        d = self._tail + new
        p = 0
        n = len(d)
        while p + 3 <= n:
            ln = (d[p + 1] << 8) | d[p + 2]
            if ln == BOOT_MARK:
                if p + BOOT_SIZE > n:
                    break
                e, s, b = (int.from_bytes(d[p + k : p + k + 4], "big") for k in (3, 7, 11))
                self.boots.append(TraceBoot(e, s, b, (d[p + 15] << 8) | d[p + 16]))
                p += BOOT_SIZE
                continue
            if p + 3 + ln > n:
                break
            if not self.boots:
                raise ValueError("%s: an event before any boot record" % self.path)
            tb = self.boots[-1]
            tb.pos.append(len(tb.blob))
            tb.blob += d[p : p + 3 + ln]
            self.events += 1
            p += 3 + ln
        self._tail = d[p:]
        return self.events

    def final_boots(self) -> list[TraceBoot]:
        """The boots, one per boot count: a boot that built its ring twice (lwboot's fallbacks) keeps
        the last ring (the earlier one took no event)."""
        out: list[TraceBoot] = []
        for tb in self.boots:
            if out and out[-1].boots == tb.boots and not len(out[-1]):
                out[-1] = tb
            else:
                out.append(tb)
        return out


CLASSES = ("stored", "lost", "before_contact", "died_with_boot", "silent")


@dataclass
class Tally:
    name: str
    transport: str = ""
    boots: int = 0  # boots in the record
    restarts_made: int = -1  # power cuts the run made (-1: not known to the checker)
    restarts_detected: int = 0  # boots after the first with a boots row in the store
    bridge_restarts: int = 0  # the bridge's own restart counter (devices.counters)
    generated: int = 0
    stored: int = 0
    lost: int = 0
    before_contact: int = 0
    died_with_boot: int = 0
    silent: int = 0
    duplicates: int = 0
    corrupted: int = 0
    phantom: int = 0
    double_counted: int = 0
    overruns: int = 0  # overrun loss rows
    dup_arrivals: int = 0  # duplicated / late arrivals the bridge recognised (logged, not stored)
    bad_frames: int = 0  # the bridge's crc_errors + bad_frames + auth_* (committed counters)
    crc_errors: int = 0  # of which CRC rejects
    auth_rejects: int = 0  # of which authentication rejects (forged, replayed, unsigned)
    problems: list[str] = field(default_factory=list)
    per_boot: list[dict[str, Any]] = field(default_factory=list)  # the classes of each boot

    def add(self, o: Tally) -> None:
        for k, v in asdict(o).items():
            if isinstance(v, int) and k != "restarts_made":
                setattr(self, k, getattr(self, k) + v)
        self.per_boot += [{"board": o.name, **pb} for pb in o.per_boot]
        if o.restarts_made >= 0:
            self.restarts_made = max(self.restarts_made, 0) + o.restarts_made
        self.problems += [o.name + ": " + p for p in o.problems]

    @property
    def ok(self) -> bool:
        return not (
            self.silent or self.duplicates or self.corrupted or self.phantom or self.double_counted
            or self.problems or self.restarts_detected != self.boots - 1
            or (self.restarts_made >= 0 and self.restarts_made != self.boots - 1)
        )  # fmt: skip


def check_board(
    r: StoreReader, name: str, trace: Trace, restarts_made: int = -1, final_cut: bool = False
) -> Tally:
    """Classify every event of one board's record against the store (see the module docstring).

    final_cut: the board's last boot also ended by a power cut (not by the run's quiesce + drain)."""
    t = Tally(name, restarts_made=restarts_made)
    trace.update()
    boots = trace.final_boots()
    t.boots = len(boots)
    row = r.device(name)
    if row is None:
        t.problems.append("not in the store")
        t.generated = sum(len(b) for b in boots)
        t.silent = t.generated
        return t
    dev, t.transport = row.dev, row.transport
    dc = row.device_counters
    t.bridge_restarts = dc.get("restarts", 0)
    t.crc_errors = dc.get("crc_errors", 0)
    t.auth_rejects = sum(v for k, v in dc.items() if k.startswith("auth_"))
    t.bad_frames = t.crc_errors + dc.get("bad_frames", 0) + t.auth_rejects
    t.dup_arrivals = r.duplicate_arrivals(dev)
    t.duplicates = r.stored_twice(dev)
    seen = {b.boot_epoch: b.boots for b in r.boots(dev)}
    epochs = {b.epoch for b in boots}
    for e in seen:
        if e not in epochs:
            t.phantom += 1
            t.problems.append("boots row for epoch %08x, which the board never booted" % e)
    for e, c in r.events_per_boot(dev).items():
        if e not in epochs:
            t.phantom += c
            t.problems.append("%d events stored under epoch %08x, which the board never booted" % (c, e))
    losses = r.losses(dev)
    for bi, tb in enumerate(boots):
        n = len(tb)
        t.generated += n
        if bi and tb.epoch in seen:
            t.restarts_detected += 1
        if tb.epoch in seen and seen[tb.epoch] != tb.boots:
            t.problems.append(
                "epoch %08x: boots row says boot %d, the board counted %d"
                % (tb.epoch, seen[tb.epoch], tb.boots)
            )
        if tb.epoch not in seen and (n or bi):
            t.problems.append(
                "boot %d (epoch %08x, %d events) never seen by the bridge" % (tb.boots, tb.epoch, n)
            )
        rows = [x for x in losses if x.boot_epoch == tb.epoch]
        _check_rows(t, tb, rows)
        events = list(r.events(dev, tb.epoch))
        _check_bytes(t, tb, events)
        # the classes: the one accounting check (leadwire.bridge.accounting). A boot ended by a power
        # cut keeps its tail past what the bridge stored or counted: pending there is died with boot
        cut = bi < len(boots) - 1 or final_cut
        stored = [e.offset for e in events]
        polled = None
        if cut:
            ends = [tb.rel(o) for o in stored if tb.rel(o) < n]
            ends += [tb.rel(x.n0) - 1 for x in rows if x.lost is None]
            ends += [tb.rel((x.client_n + x.lost) & M32) for x in rows if x.lost]
            polled = (tb.start + max([-1, *[e for e in ends if e < 0x80000000]])) & M32
        led = check_boot(tb.start, tb.offset(n - 1) if n else None, stored, rows, polled)
        _tally_boot(t, tb, led, cut)
    return t


def _check_bytes(t: Tally, tb: TraceBoot, events: list[Any]) -> None:
    """Stored events against the record, byte for byte (channel and payload)."""
    n = len(tb)
    for e in events:
        i = tb.rel(e.offset)
        if i < n and (e.channel, bytes(e.data) if isinstance(e.data, bytes) else None) != tb.record(i):
            t.corrupted += 1


def _check_rows(t: Tally, tb: TraceBoot, rows: list[LossRow]) -> None:
    """The RECOVERY behind each row against the record: n1 was generated, and n0 was the oldest event
    held only if the ring was full (or nothing had left it yet): a loss the ring really had, not one
    the bridge made up."""
    n = len(tb)
    for x in rows:
        i0, i1 = tb.rel(x.n0), tb.rel(x.n1)
        held = i1 - i0 + 1
        if i1 >= n or (tb.capacity and (held > tb.capacity or (i0 and held != tb.capacity))):
            t.problems.append(
                "epoch %08x: %s row n0=%d n1=%d does not match the ring (%d generated, capacity %d)"
                % (tb.epoch, x.cause, x.n0, x.n1, n, tb.capacity)
            )
        t.overruns += x.cause == "overrun"


def _tally_boot(t: Tally, tb: TraceBoot, led: Ledger, cut: bool) -> None:
    """The boot's classes into t (and its per-boot row); cut: the boot ended by a power cut."""
    tail = led.pending
    pb = {"boot": tb.boots, "epoch": tb.epoch, "generated": led.generated, "stored": led.stored,
          "lost": led.lost, "before_contact": led.before_contact, "died_with_boot": tail if cut else 0,
          "silent": led.silent + (0 if cut else tail),
          "ended": "power cut" if cut else "run end"}  # fmt: skip
    t.per_boot.append(pb)
    for k in CLASSES:
        setattr(t, k, getattr(t, k) + pb[k])
    t.phantom += led.phantom
    t.double_counted += led.double
    t.problems += ["epoch %08x: %s" % (tb.epoch, p) for p in led.problems]
    if tail and not cut:
        t.problems.append("epoch %08x: last %d events never stored (not drained)" % (tb.epoch, tail))


def check(db: Path, traces: dict[str, Trace], restarts_made: dict[str, int] | None = None) -> list[Tally]:
    with StoreReader(db) as r:
        return [check_board(r, name, tr, (restarts_made or {}).get(name, -1)) for name, tr in traces.items()]


COLUMNS = (
    ("board", "name"), ("link", "transport"), ("boots", "boots"), ("cuts", "restarts_made"),
    ("detected", "restarts_detected"), ("generated", "generated"), ("stored", "stored"),
    ("lost(counted)", "lost"), ("before-contact", "before_contact"), ("died-with-boot", "died_with_boot"),
    ("SILENT", "silent"), ("dup", "duplicates"), ("corrupt", "corrupted"), ("phantom", "phantom"),
    ("overruns", "overruns"), ("dup-arrivals", "dup_arrivals"), ("bad-frames", "bad_frames"),
    ("crc", "crc_errors"), ("auth", "auth_rejects"),
)  # fmt: skip


def format_table(tallies: list[Tally], total: Tally | None = None) -> str:
    rows = [[h for h, _ in COLUMNS]]
    for t in [*tallies, *([total] if total else [])]:
        rows.append([str(getattr(t, k)) for _, k in COLUMNS])
    return _table(rows, left=2)
