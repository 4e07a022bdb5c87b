"""The chaos run (issue 6): virtual boards through netem, boards and the bridge killed at random, and a
checker that accounts for every event the boards generated.

The run (:func:`run`):

* virtual boards (tools/board.py: the firmware on the MicroPython unix port), UDP and serial, each
  with a device-side record: a file ``trace`` on the board's flash makes the unix board append every
  event its ring takes to it, byte for byte, with one unbuffered write() per event, and a boot record
  (epoch, start offset, boot count) for every ring it builds (firmware/boards/unix.py). A power cut
  (SIGKILL) cannot lose an event the agent could have sent: the record is written in the same
  synchronous step as the ring write, before the agent can answer any poll;
* one netem proxy per board (tools/netem.py), seeded: loss, duplication, reordering, corruption;
* the bridge daemon as a subprocess (``leadwire bridge --config``) into SQLite;
* a seeded schedule of faults: boards power-cut and powered on again (``VirtualBoard.restart()``),
  the bridge SIGKILLed, down for a random while, started again;
* the boards are held (a file ``pause`` on their flash: the ring takes nothing) until the bridge is
  up, and held again at the end: nothing more is generated, the bridge drains every ring to its last
  event, gets SIGTERM, and :func:`check` runs.

The checker (:func:`check`) takes each board's record as ground truth. Within a boot, offsets are
consecutive from the start offset, so record i of a boot is offset start + i. Every generated event
is put in exactly one class:

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

From Python (tests/chaos, bench/chaos_bench.py)::

    res = run(ChaosOptions(out=tmp, boards=default_boards(3), seconds=60, board_kills=2, bridge_kills=2))
    print(res.table()); assert res.ok
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from array import array
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import click

M32 = 0xFFFFFFFF
BOOT_MARK = 0xFFFF  # the length field of a boot record in a trace (no event is that long)
BOOT_SIZE = 17  # 0x00, 0xFFFF, epoch u32, start u32, boots u32, ring capacity u16
SENSOR_CH = 1
HEALTH_CH = 8
ALARM_CH = 9
ROOT = Path(__file__).resolve().parents[1]

Say = Callable[[str], None]


# ------------------------------------------------------------------------------------ the record
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


# ------------------------------------------------------------------------------------ options
@dataclass
class BoardSpec:
    name: str
    transport: str  # "udp" | "serial"
    hz: int = 100  # sensor rate (samples of 16 bytes on channel 1)
    ring: int = 512  # ring capacity (events)
    size: int = 16


@dataclass
class ChaosOptions:
    out: Path
    boards: list[BoardSpec] = field(default_factory=lambda: default_boards(3))
    seconds: float = 60.0  # generation phase (or until `events` when that is set)
    events: int = 0  # stop generating once the boards recorded this many events (0: by time)
    board_kills: int = 2
    bridge_kills: int = 2
    loss: float = 0.10
    dup: float = 0.05
    reorder: float = 0.05
    corrupt: float = 0.01
    seed: int = 1
    min_gap: float = 4.0  # seconds between two faults (a new boot is reached before the next one)
    bridge_down: tuple[float, float] = (0.2, 2.0)  # how long the bridge stays dead (uniform)
    drain_timeout: float = 60.0
    progress_every: float = 10.0
    frames: int = 4  # answer frames per POLL (burst polls)
    auth: bool = True  # a random key per board, every frame signed; False: `auth = false` everywhere


def default_boards(n: int, hz: int = 100) -> list[BoardSpec]:
    """n boards alternating UDP / serial; every third one (the 3rd, 6th...) has a small ring (128),
    so that a bridge outage overruns it and exact overrun counts are exercised."""
    out = []
    for i in range(n):
        transport = "udp" if i % 2 == 0 else "serial"
        ring = 128 if i % 3 == 2 else 512
        out.append(BoardSpec("board-%d-%s" % (i + 1, transport), transport, hz, ring))
    return out


def board_config(spec: BoardSpec) -> dict[str, Any]:
    """The device config (config.json) of a chaos board. One place: authentication keys go here."""
    return {
        "id": spec.name,
        "ring": spec.ring,
        "sensors": [{"ch": SENSOR_CH, "hz": spec.hz, "size": spec.size}],
        "health": {"ch": HEALTH_CH, "ms": 1000},
        "alarm": {"ch": ALARM_CH, "ms": 0},
    }


def bridge_toml(db: Path, devices: list[tuple[str, str, str, str | None]], frames: int = 4) -> str:
    """The bridge config: (id, transport, address, key as hex or None for auth off) per device."""
    lines = [
        "# written by tools/chaos.py",
        "[bridge]",
        'id = "chaos"',
        'metrics = ""',
        "[store]",
        'path = "%s"' % db,
        "commit_interval = 0.05",
        "[polling]",
        "interval = 0.02",
        "interval_min = 0.005",
        "interval_max = 0.1",
        "timeout = 0.15",
        "backoff_max = 0.5",
        "hello_interval = 5.0",
        "frames = %d" % frames,  # burst polls: a serial answer frame (256 B) holds ~12 events
    ]
    for dev_id, transport, address, key in devices:
        lines += ["", "[[device]]", 'id = "%s"' % dev_id, '%s = "%s"' % (transport, address)]
        lines.append('key = "%s"' % key if key else "auth = false")
    return "\n".join(lines) + "\n"


# mean frame sizes on a serial chaos link (measured: bytes / frames in netem's counts, COBS and
# delimiter included): POLLs up, EVENTS answers down
SERIAL_FRAME_UP = 18
SERIAL_FRAME_DOWN = 180


def impairments(opts: ChaosOptions, k: int) -> dict[str, Any]:
    """netem profiles for board k. UDP: the probabilities per datagram, both directions. Serial is a
    byte stream: dup and reorder are per frame, loss and corruption per byte, set so that a frame of
    the mean size of its direction is hit with the same probabilities: 1 - (1 - p) ** (1 / size)
    per byte (loss in runs of 1-4 bytes)."""
    from leadwire.tools.netem import Impairment

    seed = opts.seed * 1000 + k

    def serial(size: int) -> Impairment:
        loss = 1 - (1 - opts.loss) ** (1 / size)
        corrupt = 1 - (1 - opts.corrupt) ** (1 / size)
        return Impairment(loss=loss, loss_run=4, dup=opts.dup, reorder=opts.reorder, reorder_ms=30,
                          corrupt=corrupt, seed=seed)  # fmt: skip

    return {
        "udp": Impairment(loss=opts.loss, dup=opts.dup, reorder=opts.reorder, reorder_ms=30,
                          corrupt=opts.corrupt, seed=seed),
        "serial_up": serial(SERIAL_FRAME_UP),
        "serial_down": serial(SERIAL_FRAME_DOWN),
    }  # fmt: skip


@dataclass
class Fault:
    at: float  # seconds from the start of the generation phase
    kind: str  # "board" | "bridge"
    board: str = ""
    down: float = 0.0  # bridge: seconds dead
    done_at: float | None = None


def plan_faults(opts: ChaosOptions, duration: float) -> list[Fault]:
    """The seeded fault schedule: board_kills + bridge_kills faults in [10%, 85%] of the duration,
    one per slot with jitter (never closer than `min_gap` when the duration allows), kinds shuffled,
    boards drawn at random."""
    rng = random.Random("leadwire-chaos/%d" % opts.seed)
    kinds = ["board"] * opts.board_kills + ["bridge"] * opts.bridge_kills
    rng.shuffle(kinds)
    n = len(kinds)
    out: list[Fault] = []
    if not n:
        return out
    slot = 0.75 * duration / n
    t = 0.0
    for i, kind in enumerate(kinds):
        at = max(0.1 * duration + slot * (i + rng.uniform(0.1, 0.9)), t + opts.min_gap if out else 0.0)
        t = at
        f = Fault(at, kind)
        if kind == "board":
            f.board = rng.choice(opts.boards).name
        else:
            f.down = rng.uniform(*opts.bridge_down)
        out.append(f)
    return out


# ------------------------------------------------------------------------------------ the checker
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


def _covered(lo: int, count: int, marks: bytearray, value: int) -> tuple[int, int]:
    """Mark [lo, lo + count) with value where unmarked; returns (newly marked, already marked)."""
    hi = min(lo + count, len(marks))
    seg = marks[lo:hi]
    taken = len(seg) - seg.count(0)
    marks[lo:hi] = bytes([value]) * (hi - lo) if not taken else bytes(x or value for x in seg)
    return hi - lo - taken, taken


def check_board(
    conn: sqlite3.Connection, name: str, trace: Trace, restarts_made: int = -1, final_cut: bool = False
) -> Tally:
    """Classify every event of one board's record against the store (see the module docstring).

    final_cut: the board's last boot also ended by a power cut (not by the run's quiesce + drain)."""
    t = Tally(name, restarts_made=restarts_made)
    trace.update()
    boots = trace.final_boots()
    t.boots = len(boots)
    row = conn.execute("SELECT dev, transport, counters FROM devices WHERE device_id=?", (name,)).fetchone()
    if row is None:
        t.problems.append("not in the store")
        t.generated = sum(len(b) for b in boots)
        t.silent = t.generated
        return t
    dev, t.transport, counters = row
    dc = json.loads(counters or "{}").get("device", {})
    t.bridge_restarts = int(dc.get("restarts", 0))
    t.crc_errors = int(dc.get("crc_errors", 0))
    t.auth_rejects = sum(int(v) for k, v in dc.items() if k.startswith("auth_"))
    t.bad_frames = t.crc_errors + int(dc.get("bad_frames", 0)) + t.auth_rejects
    t.dup_arrivals = conn.execute(
        "SELECT COUNT(*) FROM arrivals WHERE dev=? AND kind=0 AND duplicate=1", (dev,)
    ).fetchone()[0]
    t.duplicates = conn.execute(
        "SELECT COALESCE(SUM(c - 1), 0) FROM (SELECT COUNT(*) c FROM arrivals WHERE dev=? AND kind=0 "
        "AND duplicate=0 GROUP BY boot_epoch, seq HAVING c > 1)",
        (dev,),
    ).fetchone()[0]
    seen = {
        e: (b, by)
        for e, b, by in conn.execute("SELECT boot_epoch, boots, detected_by FROM boots WHERE dev=?", (dev,))
    }
    epochs = {b.epoch for b in boots}
    for e in seen:
        if e not in epochs:
            t.phantom += 1
            t.problems.append("boots row for epoch %08x, which the board never booted" % e)
    stray = conn.execute(
        "SELECT boot_epoch, COUNT(*) FROM events WHERE dev=? GROUP BY boot_epoch", (dev,)
    ).fetchall()
    for e, c in stray:
        if e not in epochs:
            t.phantom += c
            t.problems.append("%d events stored under epoch %08x, which the board never booted" % (c, e))
    losses = conn.execute(
        "SELECT seq, boot_epoch, client_n, n0, n1, lost, cause FROM losses WHERE dev=? ORDER BY seq", (dev,)
    ).fetchall()
    for bi, tb in enumerate(boots):
        n = len(tb)
        t.generated += n
        if bi and tb.epoch in seen:
            t.restarts_detected += 1
        if tb.epoch in seen and seen[tb.epoch][0] != tb.boots:
            t.problems.append(
                "epoch %08x: boots row says boot %d, the board counted %d"
                % (tb.epoch, seen[tb.epoch][0], tb.boots)
            )
        if tb.epoch not in seen and (n or bi):
            t.problems.append(
                "boot %d (epoch %08x, %d events) never seen by the bridge" % (tb.boots, tb.epoch, n)
            )
        # 1 stored, 2 lost (counted), 3 before contact; 0 unclassified so far
        marks = bytearray(n)
        last = -1  # highest index the bridge stored or counted
        for off, ch, data in conn.execute(
            "SELECT offset, channel, data FROM events WHERE dev=? AND boot_epoch=?", (dev, tb.epoch)
        ):
            i = tb.rel(off)
            if i >= n:
                t.phantom += 1
                t.problems.append("epoch %08x: stored offset %d was never generated" % (tb.epoch, off))
                continue
            if marks[i]:
                continue  # a duplicate: counted above
            marks[i] = 1
            last = max(last, i)
            if (ch, bytes(data) if isinstance(data, bytes) else None) != tb.record(i):
                t.corrupted += 1
        head_done = False
        for _seq, epoch, client_n, n0, n1, lost, cause in losses:
            if epoch != tb.epoch:
                continue
            # the RECOVERY behind the row against the record: n1 was generated, and n0 was the oldest
            # event held only if the ring was full (or nothing had left it yet): a loss the ring
            # really had, not one the bridge made up
            i0, i1 = tb.rel(n0), tb.rel(n1)
            held = i1 - i0 + 1
            if i1 >= n or (tb.capacity and (held > tb.capacity or (i0 and held != tb.capacity))):
                t.problems.append(
                    "epoch %08x: %s row n0=%d n1=%d does not match the ring (%d generated, capacity %d)"
                    % (tb.epoch, cause, n0, n1, n, tb.capacity)
                )
            if lost is None:  # restart / first contact: the head before n0 is unknowable to the host
                if head_done:
                    continue
                head_done = True
                if i0 > n:
                    t.problems.append("epoch %08x: %s row n0=%d beyond the boot" % (tb.epoch, cause, n0))
                    continue
                _, taken = _covered(0, i0, marks, 3)
                if taken:
                    t.problems.append(
                        "epoch %08x: %d events stored before the boot's first contact" % (tb.epoch, taken)
                    )
                last = max(last, i0 - 1)
                continue
            t.overruns += cause == "overrun"
            lo = tb.rel((client_n + 1) & M32)
            if lo + lost > n:
                t.double_counted += lo + lost - n
                t.problems.append(
                    "epoch %08x: loss row counts %d events never generated" % (tb.epoch, lo + lost - n)
                )
            _, taken = _covered(lo, lost, marks, 2)
            if taken:
                t.double_counted += taken
                t.problems.append(
                    "epoch %08x: loss row (n=%d, lost %d) overlaps %d events already stored or counted"
                    % (tb.epoch, client_n, lost, taken)
                )
            last = max(last, lo + lost - 1)
        cut = bi < len(boots) - 1 or final_cut
        unmarked_before = marks[: last + 1].count(0)
        tail = n - 1 - last if last < n else 0
        pb = {"boot": tb.boots, "epoch": tb.epoch, "generated": n, "stored": marks.count(1),
              "lost": marks.count(2), "before_contact": marks.count(3), "died_with_boot": tail if cut else 0,
              "silent": unmarked_before + (0 if cut else tail),
              "ended": "power cut" if cut else "run end"}  # fmt: skip
        t.per_boot.append(pb)
        for k in CLASSES:
            setattr(t, k, getattr(t, k) + pb[k])
        if tail and not cut:
            t.problems.append("epoch %08x: last %d events never stored (not drained)" % (tb.epoch, tail))
        if unmarked_before:
            t.problems.append("epoch %08x: %d events missing with no loss row" % (tb.epoch, unmarked_before))
    return t


def check(db: Path, traces: dict[str, Trace], restarts_made: dict[str, int] | None = None) -> list[Tally]:
    from leadwire.bridge.store import connect_ro

    conn = connect_ro(str(db))
    try:
        return [
            check_board(conn, name, tr, (restarts_made or {}).get(name, -1)) for name, tr in traces.items()
        ]
    finally:
        conn.close()


# ------------------------------------------------------------------------------------ the run
@dataclass
class ChaosResult:
    options: dict[str, Any]
    tallies: list[Tally]
    faults: list[Fault]
    netem: dict[str, dict[str, Any]]
    seconds: dict[str, float]
    bridge_starts: int = 0
    pids: list[int] = field(default_factory=list)  # every process the run started (all ended)

    @property
    def total(self) -> Tally:
        t = Tally("total")
        for x in self.tallies:
            t.add(x)
        return t

    @property
    def ok(self) -> bool:
        return all(x.ok for x in self.tallies)

    def table(self) -> str:
        return format_table(self.tallies, self.total)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "options": self.options,
            "tallies": [asdict(x) for x in self.tallies],
            "total": asdict(self.total),
            "faults": [asdict(f) for f in self.faults],
            "netem": self.netem,
            "seconds": self.seconds,
            "bridge_starts": self.bridge_starts,
            "pids": self.pids,
        }


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
    w = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.ljust(w[i]) if i < 2 else c.rjust(w[i]) for i, c in enumerate(r)) for r in rows]
    return "\n".join(lines)


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class _Bridge:
    """The bridge subprocess: started, SIGKILLed, started again; its log appended across runs."""

    def __init__(self, cfg: Path, log: Path) -> None:
        self.cfg = cfg
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.pids: list[int] = []

    def start(self, timeout: float = 60.0) -> None:
        with self.log.open("ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "leadwire.cli", "bridge", "--config", str(self.cfg)],
                stdout=subprocess.DEVNULL,
                stderr=err,
                cwd=ROOT,
                start_new_session=True,
            )
        self.starts += 1
        self.pids.append(self.proc.pid)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.log.read_text(errors="replace").count('"bridge_started"') >= self.starts:
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError("the bridge did not start:\n" + self.log.read_text(errors="replace")[-2000:])

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 30.0) -> int | None:
        p = self.proc
        if p is None:
            return None
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                return p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        return p.returncode


def _last_stored(db: Path, device_id: str, epoch: int, offset: int) -> bool:
    from leadwire.bridge.store import connect_ro

    if not db.exists():
        return False
    try:
        conn = connect_ro(str(db))
        try:
            return (
                conn.execute(
                    "SELECT 1 FROM events e JOIN devices d ON d.dev = e.dev WHERE d.device_id = ? "
                    "AND e.boot_epoch = ? AND e.offset = ?",
                    (device_id, epoch, offset),
                ).fetchone()
                is not None
            )
        finally:
            conn.close()
    except sqlite3.Error:
        return False


def _stored_count(db: Path) -> int:
    from leadwire.bridge.store import connect_ro

    if not db.exists():
        return 0
    try:
        conn = connect_ro(str(db))
        try:
            return int(conn.execute("SELECT COUNT(*) FROM events").fetchone()[0])
        finally:
            conn.close()
    except sqlite3.Error:
        return 0


def run(opts: ChaosOptions, say: Say = _stderr) -> ChaosResult:
    """The whole chaos run (boards, netem, bridge, faults, quiesce, drain, check). Every process it
    starts is stopped before it returns, also on an exception."""
    from leadwire.tools.board import VirtualBoard, start_board
    from leadwire.tools.netem import SerialImpairer, UdpImpairer, in_thread

    out = opts.out.resolve()  # absolute: the bridge reads paths relative to its config file
    out.mkdir(parents=True, exist_ok=True)
    for stale in ("store.db", "store.db-wal", "store.db-shm", "bridge.log"):
        with contextlib.suppress(FileNotFoundError):
            (out / stale).unlink()
    db = out / "store.db"
    t_start = time.monotonic()
    boards: dict[str, VirtualBoard] = {}
    traces: dict[str, Trace] = {}
    cuts: dict[str, int] = {b.name: 0 for b in opts.boards}
    imps: dict[str, Any] = {}
    bridge: _Bridge | None = None
    faults: list[Fault] = []
    secs: dict[str, float] = {}
    pids: list[int] = []
    with contextlib.ExitStack() as stack:
        # 1. boards, each with its record
        for spec in opts.boards:
            d = out / "boards" / spec.name
            if d.exists():
                for fname in ("trace", "pause", "boots", "console.log"):
                    with contextlib.suppress(FileNotFoundError):
                        (d / fname).unlink()
            d.mkdir(parents=True, exist_ok=True)
            (d / "trace").touch()
            (d / "pause").touch()  # nothing generated before the bridge is up
            b = start_board(
                spec.transport, config=board_config(spec), board_dir=d, key="auto" if opts.auth else None
            )
            stack.callback(b.close)
            boards[spec.name] = b
            pids.append(b.pid)
            traces[spec.name] = Trace(d / "trace")
        say("chaos: %d boards up (%s)" % (len(boards), ", ".join(
            "%s ring %d, %d Hz" % (s.name, s.ring, s.hz) for s in opts.boards)))  # fmt: skip
        # 2. netem, one proxy per board
        devices = []
        for k, spec in enumerate(opts.boards):
            prof = impairments(opts, k)
            b = boards[spec.name]
            if spec.transport == "udp":
                assert b.address is not None
                imp: Any = stack.enter_context(
                    in_thread(UdpImpairer(("127.0.0.1", 0), b.address, prof["udp"]))
                )
                devices.append((spec.name, "udp", "%s:%d" % imp.address, b.key))
            else:
                assert b.port is not None
                imp = stack.enter_context(
                    in_thread(SerialImpairer(b.port, prof["serial_up"], prof["serial_down"]))
                )
                devices.append((spec.name, "serial", imp.port, b.key))
            imps[spec.name] = imp
        p = impairments(opts, 0)
        say(
            "chaos: netem loss %g dup %g reorder %g corrupt %g, seed %d (UDP per datagram; serial "
            "dup/reorder per frame, loss/corrupt per byte: up %.5f/%.6f, down %.5f/%.6f)"
            % (opts.loss, opts.dup, opts.reorder, opts.corrupt, opts.seed, p["serial_up"].loss,
               p["serial_up"].corrupt, p["serial_down"].loss, p["serial_down"].corrupt)
        )  # fmt: skip
        # 3. the bridge
        cfg = out / "bridge.toml"
        cfg.write_text(bridge_toml(db, devices, opts.frames))
        bridge = _Bridge(cfg, out / "bridge.log")
        stack.callback(bridge.kill)
        bridge.start()
        say("chaos: bridge up (pid %d), store %s" % (bridge.proc.pid if bridge.proc else 0, db))
        # 4. generation with faults
        nominal = sum(s.hz + 1 for s in opts.boards)
        duration = opts.events / nominal if opts.events else opts.seconds
        faults = plan_faults(opts, duration)
        say("chaos: %s" % ", ".join(
            "%.1fs %s" % (f.at, ("cut " + f.board) if f.kind == "board" else "bridge kill %.1fs" % f.down)
            for f in faults) if faults else "chaos: no faults")  # fmt: skip
        for spec in opts.boards:
            (out / "boards" / spec.name / "pause").unlink()
        t0 = time.monotonic()
        secs["setup"] = t0 - t_start
        next_line = t0 + opts.progress_every
        pending = list(faults)
        while True:
            now = time.monotonic()
            el = now - t0
            generated = sum(tr.update() for tr in traces.values())
            if (opts.events and generated >= opts.events) or (not opts.events and el >= opts.seconds):
                break
            if pending and el >= pending[0].at:
                f = pending.pop(0)
                f.done_at = el
                if f.kind == "board":
                    boards[f.board].restart()
                    pids.append(boards[f.board].pid)
                    cuts[f.board] += 1
                    say(
                        "chaos: %6.1fs power cut + power on of %s (pid %d)"
                        % (el, f.board, boards[f.board].pid)
                    )
                else:
                    bridge.kill()
                    say("chaos: %6.1fs bridge SIGKILLed, down %.1fs" % (el, f.down))
                    time.sleep(f.down)
                    bridge.start()
                    say(
                        "chaos: %6.1fs bridge started again (pid %d)"
                        % (time.monotonic() - t0, bridge.proc.pid if bridge.proc else 0)
                    )
                continue
            if now >= next_line:
                next_line += opts.progress_every
                done = len(faults) - len(pending)
                say(
                    "chaos: %6.1fs generated %d, stored %d, faults %d/%d"
                    % (el, generated, _stored_count(db), done, len(faults))
                )
            if bridge.proc is not None and bridge.proc.poll() is not None:
                raise RuntimeError(
                    "the bridge exited by itself (status %s):\n%s"
                    % (bridge.proc.returncode, (out / "bridge.log").read_text(errors="replace")[-2000:])
                )
            time.sleep(0.1)
        secs["generate"] = time.monotonic() - t0
        # 5. quiesce the boards, let the bridge drain them
        for spec in opts.boards:
            (out / "boards" / spec.name / "pause").touch()
        t1 = time.monotonic()
        sizes: dict[str, int] = {}
        stable = 0.0
        while time.monotonic() - t1 < 10:  # every ring stopped (each checks after at most 64 events)
            now_sizes = {n: tr.update() for n, tr in traces.items()}
            if now_sizes == sizes:
                if time.monotonic() - stable >= 1.0:
                    break
            else:
                sizes = now_sizes
                stable = time.monotonic()
            time.sleep(0.1)
        generated = sum(sizes.values())
        say("chaos: boards quiesced: %d events generated; draining" % generated)
        drained: set[str] = set()
        while time.monotonic() - t1 < opts.drain_timeout:
            for name, tr in traces.items():
                if name in drained:
                    continue
                bs = tr.final_boots()
                tb = bs[-1] if bs else None
                if tb is None or not len(tb) or _last_stored(db, name, tb.epoch, tb.offset(len(tb) - 1)):
                    drained.add(name)
            if len(drained) == len(traces):
                break
            time.sleep(0.25)
        secs["drain"] = time.monotonic() - t1
        say("chaos: drained %d/%d boards in %.1fs" % (len(drained), len(traces), secs["drain"]))
        rc = bridge.stop()
        if rc != 0:
            say("chaos: the bridge exited with status %s on SIGTERM" % rc)
        net = {name: imp.snapshot() for name, imp in imps.items()}
    secs["total"] = time.monotonic() - t_start
    t2 = time.monotonic()
    bridge_pids = bridge.pids if bridge else []
    tallies = check(db, traces, cuts)
    secs["check"] = time.monotonic() - t2
    o = asdict(opts)
    o["out"] = str(opts.out)
    return ChaosResult(o, tallies, faults, net, secs, bridge.starts if bridge else 0, pids + bridge_pids)


def netem_summary(net: dict[str, dict[str, Any]]) -> str:
    lines = []
    for name, s in net.items():
        parts = []
        for d in ("up", "down"):
            c = s[d]
            if "corrupted_out" in c:
                parts.append(
                    "%s: in %d lost %d dup %d reordered %d corrupted %d"
                    % (d, c["in"], c["lost"], c["duplicated"], c["reordered"], c["corrupted_out"])
                )
            else:
                parts.append(
                    "%s: %d bytes, lost %d bytes in %d runs, frames %d dup %d reordered %d, %d bits flipped"
                    % (d, c["in_bytes"], c["lost_bytes"], c["loss_runs"], c["frames"], c["duplicated"],
                       c["reordered"], c["corrupted"])
                )  # fmt: skip
        lines.append("  %s  %s" % (name, "; ".join(parts)))
    return "\n".join(lines)


def report(res: ChaosResult) -> str:
    t = res.total
    lines = [
        res.table(),
        "",
        "faults: %s" % ", ".join(
            "%s at %.1fs%s" % ("cut " + f.board if f.kind == "board" else "bridge kill (%.1fs down)" % f.down,
                               f.done_at if f.done_at is not None else f.at,
                               "" if f.done_at is not None else " (not reached)")
            for f in res.faults),
        "boots (events: generated = stored + lost + before contact + died with boot + silent):",
        *["  %s boot %d (%08x, ended by %s): %d = %d + %d + %d + %d + %d" % (
            pb["board"], pb["boot"], pb["epoch"], pb["ended"], pb["generated"], pb["stored"], pb["lost"],
            pb["before_contact"], pb["died_with_boot"], pb["silent"]) for pb in t.per_boot],
        "netem:",
        netem_summary(res.netem),
        "time: setup %.1fs, generation %.1fs, drain %.1fs, check %.1fs, total %.1fs" % (
            res.seconds.get("setup", 0), res.seconds.get("generate", 0), res.seconds.get("drain", 0),
            res.seconds.get("check", 0), res.seconds.get("total", 0)),
    ]  # fmt: skip
    for p in t.problems:
        lines.append("PROBLEM " + p)
    lines.append(
        "result: %s - %d generated = %d stored + %d lost (counted) + %d before contact + %d died with "
        "their boot + %d SILENT; %d duplicates, %d corrupted, %d phantom; restarts %d made, %d detected"
        % ("OK" if res.ok else "FAIL", t.generated, t.stored, t.lost, t.before_contact, t.died_with_boot,
           t.silent, t.duplicates, t.corrupted, t.phantom, t.restarts_made, t.restarts_detected)
    )  # fmt: skip
    return "\n".join(lines)


@click.command()
@click.option("--out", type=click.Path(file_okay=False), default="chaos-out", show_default=True)
@click.option("--boards", type=click.IntRange(1, 16), default=3, show_default=True,
              help="Virtual boards (UDP, serial, ...).")
@click.option("--hz", type=click.IntRange(1, 100000), default=100, show_default=True,
              help="Sensor rate per board.")
@click.option("--seconds", type=click.FloatRange(1, 86400), default=60.0, show_default=True)
@click.option("--events", type=click.IntRange(0), default=0,
              help="Generate this many events instead of --seconds.")
@click.option("--board-kills", type=click.IntRange(0), default=2, show_default=True)
@click.option("--bridge-kills", type=click.IntRange(0), default=2, show_default=True)
@click.option("--loss", type=click.FloatRange(0, 1), default=0.10, show_default=True)
@click.option("--dup", type=click.FloatRange(0, 1), default=0.05, show_default=True)
@click.option("--reorder", type=click.FloatRange(0, 1), default=0.05, show_default=True)
@click.option("--corrupt", type=click.FloatRange(0, 1), default=0.01, show_default=True)
@click.option("--seed", type=int, default=1, show_default=True)
@click.option(
    "--auth/--no-auth", default=True, show_default=True, help="Per-device keys, every frame signed."
)
def chaos(out: str, boards: int, hz: int, seconds: float, events: int, board_kills: int, bridge_kills: int,
          loss: float, dup: float, reorder: float, corrupt: float, seed: int,
          auth: bool) -> None:  # fmt: skip
    """Chaos run: virtual boards through netem, boards and the bridge killed at random; every event
    accounted for against the boards' own records. Exit status 1 if anything is unaccounted."""
    opts = ChaosOptions(
        Path(out), default_boards(boards, hz), seconds, events, board_kills, bridge_kills, loss, dup, reorder,
        corrupt, seed, auth=auth,
    )  # fmt: skip
    res = run(opts)
    (Path(out) / "result.json").write_text(json.dumps(res.as_dict(), indent=1))
    print(report(res))
    sys.exit(0 if res.ok else 1)
