"""`leadwire demo`: the whole system end to end on real parts, nothing to configure.

Stages (progress lines on stderr, the summary on stdout):

1. virtual boards: the firmware on the MicroPython unix port (tools/board.py), alternately over
   UDP and over a serial pty, one sensor channel (sample numbers: the boards' ground truth) and a
   health record;
2. simulated devices (tools/simdevice.py, the light simulator, in two worker processes): a steady
   group and a small-ring group whose ring overruns when a poll is lost; each generates exactly
   ``rate x seconds`` events (``--limit``), event i carrying its own number: the simulators'
   ground truth;
3. netem (tools/netem.py): one impairing proxy per device, seeded loss, duplication, reordering
   (and corruption of UDP answers), all in one event loop on a thread of this process;
4. the bridge, as a subprocess (`leadwire bridge --config OUT/bridge.toml`) into OUT/store.db;
   midway one board is power-cut and powered on again (`VirtualBoard.restart()`); when the
   simulators have generated everything and the bridge has drained them, netem stops and the
   bridge gets SIGTERM;
5. `leadwire export` into OUT/export (Parquet), then `leadwire fleet` on local[2] into OUT/report
   (index.html with the plots), as a subprocess;
6. the checks (exit status 1 if one fails) and the summary table.

Checks: for every simulated device, events stored + exact losses counted by the bridge + events
that had left the ring before the first contact == events generated; for every board boot, no
sample stored twice and no missing sample where the bridge counted no loss, and offsets stored +
counted lost == the boot's offset span; the restart caused is the one restart detected; the
corrupted UDP answers netem sent == the bad frames the bridge counted; the Spark tables equal the
store (per device and in total).

Every process the demo starts (boards, simulators, bridge, Spark's Python and JVM) runs in its own
process group, is listed in OUT/pids.json and is stopped on exit, also on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import itertools
import json
import os
import shutil
import signal
import sqlite3
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any

import click

M32 = 0xFFFFFFFF
MARKER_ENV = "LEADWIRE_DEMO_RUN"  # set in every child's environment: a test finds leftovers by it
BOARD_CONFIG: dict[str, Any] = {
    "ring": 256,
    "sensors": [{"ch": 1, "hz": 20, "size": 16}],
    "health": {"ch": 8, "ms": 2000},
    "alarm": {"ch": 9, "ms": 0},
}
BLACKOUT_S = 2.0  # the outage of the small-ring devices' links: 80 events at 40/s, ring 32
SENSOR_CH = 1
HEALTH_CH = 8
EVENT = struct.Struct(">QII")  # simdevice payload: generation time us, device index, event number


class DemoError(Exception):
    """A stage could not run (not a failed check): str(e) says why."""


class Interrupted(BaseException):
    """SIGINT or SIGTERM: unwinds to the cleanup."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


# ------------------------------------------------------------------------------------ progress
class Progress:
    def __init__(self, stream: IO[str] | None = None) -> None:
        self.t0 = time.monotonic()
        self.stream = stream or sys.stderr

    def __call__(self, msg: str) -> None:
        print("[demo %6.1fs] %s" % (self.elapsed(), msg), file=self.stream, flush=True)

    def elapsed(self) -> float:
        return time.monotonic() - self.t0


# ------------------------------------------------------------------------ processes and signals
class Reaper:
    """Every process the demo starts, and the signal handling that guarantees they are stopped.

    SIGINT and SIGTERM raise Interrupted in the main thread, except inside `deferred()` (while a
    process is being started and registered), where they are held and raised right after it, so
    no process can be started without being registered. The children run in their own process
    groups (a terminal's Ctrl-C reaches only the demo); `close()` stops each group.
    """

    def __init__(self, out: Path, run_id: str) -> None:
        self.out = out
        self.run_id = run_id
        self.procs: list[tuple[str, subprocess.Popen[Any]]] = []
        self.boards: list[Any] = []  # VirtualBoard
        self.pids: list[dict[str, Any]] = []
        self._held: int | None = None
        self._defer = 0
        self._old: dict[int, Any] = {}

    # -- signals
    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old[sig] = signal.signal(sig, self._on_signal)

    def uninstall(self) -> None:
        for sig, h in self._old.items():
            signal.signal(sig, h)
        self._old = {}

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._defer:
            self._held = self._held or signum
            return
        raise Interrupted(signum)

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        self._defer += 1
        try:
            yield
        finally:
            self._defer -= 1
            if not self._defer and self._held is not None:
                signum, self._held = self._held, None
                raise Interrupted(signum)

    def ignore_signals(self) -> None:
        """During cleanup: a second Ctrl-C must not cut it short."""
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)

    # -- processes
    def env(self) -> dict[str, str]:
        return {**os.environ, MARKER_ENV: self.run_id, "PYTHONUNBUFFERED": "1"}

    def popen(self, name: str, cmd: list[str], **kw: Any) -> subprocess.Popen[Any]:
        with self.deferred():
            p: subprocess.Popen[Any] = subprocess.Popen(cmd, start_new_session=True, env=self.env(), **kw)
            self.procs.append((name, p))
            self._record(name, p.pid)
        return p

    def start_board(self, name: str, transport: str, board_dir: Path, config: dict[str, Any]) -> Any:
        from leadwire.tools.board import start_board

        with self.deferred():
            b = start_board(transport, config=config, board_dir=board_dir, key="auto")  # a random key
            self.boards.append(b)
            self._record(name, b.pid)
        return b

    def restart_board(self, name: str, b: Any) -> None:
        with self.deferred():
            b.restart()
            self._record(name, b.pid)

    def _record(self, name: str, pid: int) -> None:
        self.pids.append({"name": name, "pid": pid})
        tmp = self.out / ".pids.json.tmp"
        tmp.write_text(json.dumps({"run": self.run_id, "demo_pid": os.getpid(), "procs": self.pids}))
        tmp.replace(self.out / "pids.json")

    @staticmethod
    def stop_group(p: subprocess.Popen[Any], sig: int = signal.SIGTERM, timeout: float = 10.0) -> int | None:
        """Signal the process group of p, wait for p, then for the group to be empty (SIGKILL after
        the timeout). Returns p's exit status."""
        pgid = p.pid
        if p.poll() is None or _group_alive(pgid):  # also when only the leader's children are left
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, sig)
        end = time.monotonic() + timeout
        try:
            p.wait(max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        while time.monotonic() < end and _group_alive(pgid):
            time.sleep(0.05)
        if _group_alive(pgid) or p.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(5)
            end = time.monotonic() + 5
            while time.monotonic() < end and _group_alive(pgid):
                time.sleep(0.05)
        return p.returncode

    def close(self) -> None:
        for b in self.boards:
            with contextlib.suppress(Exception):
                b.close()
        for _, p in reversed(self.procs):
            with contextlib.suppress(Exception):
                self.stop_group(p, signal.SIGTERM, 5.0)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # zombies count as gone: their parent (us, or init for grandchildren) reaps them
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


# ----------------------------------------------------------------------------------------- netem
class NetemHost:
    """Many impairers on one asyncio loop in a daemon thread of this process."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="demo-netem", daemon=True)
        self.thread.start()
        self.imps: list[tuple[str, str, Any]] = []  # (device id, kind "udp"/"serial", impairer)
        self.stopped_counts: list[tuple[str, str, dict[str, Any]]] | None = None

    def add(self, device_id: str, kind: str, imp: Any) -> Any:
        asyncio.run_coroutine_threadsafe(imp.start(), self.loop).result(15)
        self.imps.append((device_id, kind, imp))
        return imp

    def snapshots(self) -> list[tuple[str, str, dict[str, Any]]]:
        if self.stopped_counts is not None:
            return self.stopped_counts
        return [(d, k, imp.snapshot()) for d, k, imp in self.imps]

    def blackout(self, device_ids: set[str], seconds: float) -> int:
        """A link outage starting now, both directions, on these devices' proxies."""
        n = 0
        for d, _, imp in self.imps:
            if d in device_ids:
                self.loop.call_soon_threadsafe(imp.blackout, seconds)
                n += 1
        return n

    def totals(self) -> dict[str, dict[str, int]]:
        return netem_totals(self.snapshots())

    def stop(self) -> None:
        if self.stopped_counts is not None:
            return

        async def stop_all() -> None:
            await asyncio.gather(*(imp.stop() for _, _, imp in self.imps), return_exceptions=True)

        if self.loop.is_running():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(stop_all(), self.loop).result(15)
        self.stopped_counts = [(d, k, imp.snapshot()) for d, k, imp in self.imps]
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def netem_totals(snaps: list[tuple[str, str, dict[str, Any]]]) -> dict[str, dict[str, int]]:
    tot: dict[str, dict[str, int]] = {}
    for _, kind, s in snaps:
        for direction in ("up", "down"):
            t = tot.setdefault("%s_%s" % (kind, direction), {})
            for k, v in s[direction].items():
                t[k] = t.get(k, 0) + int(v)
    return tot


# ------------------------------------------------------------------------------------ the plan
@dataclass
class SimGroup:
    name: str
    count: int
    first_index: int
    rate: float
    capacity: int
    limit: int
    devices: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Device:
    id: str
    kind: str  # "board" | "sim"
    transport: str  # "udp" | "serial"
    target: str  # the device's own address or port
    address: str = ""  # what the bridge polls (netem's side)
    group: SimGroup | None = None
    index: int = 0  # simulator device index
    start: int = 0  # simulator: offset of event 0 (ground truth)
    key: str | None = field(default=None, repr=False)  # auth key (hex, a secret): bridge.toml only


def plan_sims(simulated: int, seconds: float) -> list[SimGroup]:
    """A steady group (ring 1024, 10 events/s: never overruns) and a small-ring group (ring 32, 40
    events/s: overruns whenever netem loses a poll or an answer); ~1 in 10 devices is small."""
    small = simulated // 10 if simulated >= 2 else 0
    steady = simulated - small
    groups = []
    if steady:
        groups.append(SimGroup("steady", steady, 0, 10.0, 1024, int(10 * seconds)))
    if small:
        groups.append(SimGroup("small-ring", small, steady, 40.0, 32, int(40 * seconds)))
    return groups


def impairments(seed: int, k: int) -> dict[str, Any]:
    from leadwire.tools.netem import Impairment

    s = seed * 100_003 + k
    return {
        "udp_up": Impairment(loss=0.03, dup=0.02, reorder=0.03, reorder_ms=30, seed=s),
        "udp_down": Impairment(loss=0.03, dup=0.03, reorder=0.03, reorder_ms=30, corrupt=0.005, seed=s),
        "serial": Impairment(loss=0.0003, loss_run=4, dup=0.02, reorder=0.02, reorder_ms=30, seed=s),
    }


def bridge_toml(devices: list[Device]) -> str:
    lines = [
        "# written by `leadwire demo`: every device, each behind its netem proxy",
        "[bridge]",
        'id = "demo"',
        'metrics = ""',
        'log_level = "info"',
        "[store]",
        'path = "store.db"',
        "[polling]",
        "timeout = 0.25",
        "interval_max = 1.0",
        "hello_interval = 10.0",
    ]
    for d in devices:
        lines += ["", "[[device]]", 'id = "%s"' % d.id]
        if d.transport == "udp":
            lines.append('udp = "%s"' % d.address)
        else:
            lines.append('serial = "%s"' % d.address)
        if d.kind == "sim":
            lines.append('timestamp = "prefix_us"')
        lines.append('key = "%s"' % d.key if d.key else "auth = false")  # issue 6: signed frames
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------- store facts
@dataclass
class Facts:
    """What the store says about one device."""

    id: str
    transport: str
    events: int = 0
    arrivals: int = 0
    lead: list[int] = field(default_factory=lambda: [0, 0, 0, 0])  # =1, =0, >1, <0
    lost_exact: int = 0
    lost_unknown: int = 0  # recoveries of unknown size (first contact, restart)
    overruns: int = 0
    restart_rows: int = 0
    boots: list[tuple[int, int, str]] = field(default_factory=list)  # (epoch, boots, detected_by)
    losses: list[tuple[int, int, int, int | None, str]] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    truth: str = ""
    truth_ok: bool = True
    before_contact: int | None = None
    health: dict[str, int] | None = None
    health_auth: dict[str, int] | None = None  # the board's own auth rejects (record after health)
    gaps: int = 0  # offsets missing between the first and the last event stored, per boot


def read_facts(db: Path) -> dict[str, Facts]:
    from leadwire.bridge.store import connect_ro

    conn = connect_ro(str(db))
    try:
        facts: dict[int, Facts] = {}
        for dev, device_id, transport, counters in conn.execute(
            "SELECT dev, device_id, transport, counters FROM devices"
        ):
            f = Facts(device_id, transport)
            f.counters = {k: int(v) for k, v in json.loads(counters or "{}").get("device", {}).items()}
            facts[dev] = f
        for dev, n, first, eq1, eq0, gt1, lt0 in conn.execute(
            "SELECT dev, COUNT(*), SUM(duplicate = 0), SUM(lead = 1), SUM(lead = 0), SUM(lead > 1), "
            "SUM(lead < 0) FROM arrivals WHERE kind = 0 GROUP BY dev"
        ):
            f = facts[dev]
            f.arrivals, f.events, f.lead = n, first, [eq1, eq0, gt1, lt0]
        for dev, epoch, seq, n0, lost, cause in conn.execute(
            "SELECT dev, boot_epoch, seq, n0, lost, cause FROM losses ORDER BY dev, seq"
        ):
            f = facts[dev]
            f.losses.append((epoch, seq, n0, lost, cause))
            if lost is None:
                f.lost_unknown += 1
            else:
                f.lost_exact += lost
            f.overruns += cause == "overrun"
            f.restart_rows += cause == "restart"
        spans: dict[tuple[int, int], list[int]] = {}
        for dev, epoch, offset in conn.execute("SELECT dev, boot_epoch, offset FROM events"):
            spans.setdefault((dev, epoch), []).append(offset)
        for (dev, _), offs in spans.items():
            base = offs[0]
            rel = [(o - base + 0x80000000) & M32 for o in offs]  # wrap-safe around the first
            facts[dev].gaps += max(rel) - min(rel) + 1 - len(rel)
        for dev, epoch, boots, by in conn.execute(
            "SELECT dev, boot_epoch, boots, detected_by FROM boots ORDER BY dev, first_seen_us"
        ):
            facts[dev].boots.append((epoch, boots, by))
        return {f.id: f for f in facts.values()}
    finally:
        conn.close()


def live_totals(db: Path) -> dict[str, int] | None:
    """Counts for the progress lines, read while the bridge writes (None before the store exists)."""
    from leadwire.bridge.store import connect_ro

    if not db.exists():
        return None
    try:
        conn = connect_ro(str(db))
        try:
            ev = conn.execute("SELECT COUNT(*) FROM arrivals WHERE kind = 0 AND duplicate = 0").fetchone()[0]
            dup = conn.execute("SELECT COUNT(*) FROM arrivals WHERE duplicate = 1").fetchone()[0]
            rec, lost, unk = conn.execute(
                "SELECT COUNT(*), COALESCE(SUM(lost), 0), SUM(lost IS NULL) FROM losses"
            ).fetchone()
            boots = conn.execute("SELECT COUNT(*) FROM boots").fetchone()[0]
            devs = conn.execute("SELECT COUNT(*) FROM devices WHERE has_n = 1").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error:
        return None
    return {
        "events": ev,
        "dups": dup,
        "recoveries": rec,
        "lost": lost,
        "unknown": unk or 0,
        "boots": boots,
        "devices": devs,
    }


def sims_drained(db: Path, sims: list[Device]) -> tuple[int, int]:
    """(drained, total): simulated devices whose last event (number limit - 1) the bridge has."""
    from leadwire.bridge.store import connect_ro

    try:
        conn = connect_ro(str(db))
        try:
            n = {d: (has, v) for d, has, v in conn.execute("SELECT device_id, has_n, n FROM devices")}
        finally:
            conn.close()
    except sqlite3.Error:
        return 0, len(sims)
    done = 0
    for d in sims:
        assert d.group is not None
        has, v = n.get(d.id, (0, 0))
        done += bool(has) and v == (d.start + d.group.limit - 1) & M32
    return done, len(sims)


# ------------------------------------------------------------------------------ ground truth
def check_sims(db: Path, sims: list[Device], facts: dict[str, Facts]) -> tuple[bool, str]:
    """Every simulated device: stored + exact lost + left the ring before first contact == generated,
    and every stored payload is the event its offset names (device index, event number)."""
    from leadwire.bridge.store import connect_ro

    by_id = {d.id: d for d in sims}
    bad_payload: dict[str, int] = {}
    conn = connect_ro(str(db))
    try:
        for device_id, offset, data in conn.execute(
            "SELECT d.device_id, e.offset, e.data FROM events e JOIN devices d ON d.dev = e.dev "
            "WHERE d.device_id LIKE 'sim-%'"
        ):
            d = by_id.get(device_id)
            if d is None:
                continue
            _, idx, i = EVENT.unpack_from(data)
            if idx != d.index or i != (offset - d.start) & M32:
                bad_payload[device_id] = bad_payload.get(device_id, 0) + 1
    finally:
        conn.close()
    failed = []
    for d in sims:
        f = facts.get(d.id)
        assert d.group is not None
        gen = d.group.limit
        if f is None:
            failed.append("%s: not in the store" % d.id)
            continue
        firsts = [n0 for _, _, n0, _, cause in f.losses if cause == "first_contact"]
        before = (firsts[0] - d.start) & M32 if firsts else 0
        f.before_contact = before
        total = f.events + f.lost_exact + before
        ok = total == gen and not bad_payload.get(d.id) and len(f.boots) == 1 and not f.restart_rows
        f.truth_ok = ok
        f.truth = "%d = %d stored + %d lost + %d before contact" % (gen, f.events, f.lost_exact, before)
        if not ok:
            f.truth = "MISMATCH generated %d != %d stored + %d lost + %d before contact%s" % (
                gen,
                f.events,
                f.lost_exact,
                before,
                "; %d payloads wrong" % bad_payload[d.id] if bad_payload.get(d.id) else "",
            )
            failed.append("%s: %s" % (d.id, f.truth))
    gen_total = sum(d.group.limit for d in sims if d.group)
    msg = "simulated devices: %d/%d account for every generated event (%d generated)" % (
        len(sims) - len(failed),
        len(sims),
        gen_total,
    )
    if failed:
        msg += "; " + "; ".join(failed[:5])
    return not failed, msg


def check_boards(
    db: Path, boards: list[Device], facts: dict[str, Facts], restarted: str | None
) -> tuple[bool, list[str]]:
    """Per board boot, from the boards' own numbering: sensor samples (u16, from 0 per boot) stored
    at most once and none missing where the bridge counted no loss; offsets stored + exact lost ==
    the boot's offset span from its first recovery to the last event stored. The restart the demo
    caused is the one restart detected."""
    from leadwire import messages
    from leadwire.bridge.store import connect_ro

    msgs: list[str] = []
    ok_all = True
    conn = connect_ro(str(db))
    try:
        for d in boards:
            f = facts.get(d.id)
            if f is None:
                msgs.append("%s: not in the store" % d.id)
                ok_all = False
                continue
            problems = []
            parts = []
            epochs = [e for e, _, _ in f.boots]
            for bi, epoch in enumerate(epochs):
                rows = conn.execute(
                    "SELECT e.offset, e.channel, e.data FROM events e JOIN devices d ON d.dev = e.dev "
                    "WHERE d.device_id = ? AND e.boot_epoch = ?",
                    (d.id, epoch),
                ).fetchall()
                boot_losses = [x for x in f.losses if x[0] == epoch]
                if not rows or not boot_losses:
                    parts.append("boot %d: no events" % (bi + 1))
                    continue
                n0 = boot_losses[0][2]
                lost = sum(x[3] or 0 for x in boot_losses)
                rel = sorted(((off - n0) & M32, ch, data) for off, ch, data in rows)
                span = rel[-1][0] + 1
                if span != len(rel) + lost:
                    problems.append(
                        "boot %d: offsets span %d != %d stored + %d lost" % (bi + 1, span, len(rel), lost)
                    )
                samples = [messages.decode_sample(data)[0] for _, ch, data in rel if ch == SENSOR_CH]
                # unwrap u16 in offset order
                un: list[int] = []
                base = 0
                for s in samples:
                    if un and s + base < un[-1] - 0x8000:
                        base += 0x10000
                    un.append(s + base)
                repeated = len(un) - len(set(un))
                backwards = sum(1 for a, b in itertools.pairwise(un) if b <= a)
                missing = (un[-1] - un[0] + 1 - len(set(un))) if un else 0
                if repeated or backwards:
                    problems.append(
                        "boot %d: %d samples repeated, %d out of order" % (bi + 1, repeated, backwards)
                    )
                if missing and not lost:
                    problems.append("boot %d: %d samples missing, no loss counted" % (bi + 1, missing))
                if missing > lost:
                    problems.append("boot %d: %d samples missing > %d counted lost" % (bi + 1, missing, lost))
                first = un[0] if un else 0
                if bi == 0:
                    f.before_contact = first
                elif first:
                    problems.append("boot %d: starts at sample %d, not 0" % (bi + 1, first))
                parts.append(
                    "boot %d: samples %d..%d, %d missing (%d events lost, counted)"
                    % (bi + 1, first, un[-1] if un else -1, missing, lost)
                )
                health = [
                    data for _, ch, data in rel if ch == HEALTH_CH and len(data) == messages.HEALTH_SIZE
                ]
                if health:
                    f.health = messages.decode_health(health[-1])
                size = messages.HEALTH_AUTH_SIZE
                ha = [data for _, ch, data in rel if ch == HEALTH_CH and len(data) == size]
                if ha:
                    f.health_auth = messages.decode_health_auth(ha[-1])
            want = 2 if d.id == restarted else 1
            if len(epochs) != want:
                problems.append("%d boots seen, expected %d" % (len(epochs), want))
            if d.id == restarted:
                if f.restart_rows != 1:
                    problems.append("%d restart recoveries, expected 1" % f.restart_rows)
                if len(f.boots) == 2 and f.boots[1][1] != f.boots[0][1] + 1:
                    problems.append("boot counter %d -> %d" % (f.boots[0][1], f.boots[1][1]))
            elif f.restart_rows:
                problems.append("a restart was detected that did not happen")
            f.truth_ok = not problems
            f.truth = "; ".join(problems) if problems else "ok: " + ", ".join(parts)
            ok_all &= not problems
            msgs.append("%s: %s" % (d.id, f.truth))
    finally:
        conn.close()
    return ok_all, msgs


def check_netem(facts: dict[str, Facts], snaps: list[tuple[str, str, dict[str, Any]]]) -> tuple[bool, str]:
    """Corrupted UDP answers netem sent == bad frames the bridge counted on UDP devices."""
    udp = {d for d, k, _ in snaps if k == "udp"}
    sent = sum(int(s["down"]["corrupted_out"]) for _, k, s in snaps if k == "udp")
    seen = sum(
        f.counters.get("crc_errors", 0) + f.counters.get("bad_frames", 0)
        for f in facts.values()
        if f.id in udp
    )
    return (
        sent == seen,
        "netem sent %d corrupted UDP answers; the bridge counted %d bad frames on UDP links" % (sent, seen),
    )


def check_auth(devices: list[Device], facts: dict[str, Facts]) -> tuple[bool, str]:
    """Every device signed; the bridge refused no frame as forged or unsigned (the line only loses,
    duplicates, delays and corrupts: duplicates and late copies are replays, corruption CRC errors)."""
    signed = sum(1 for d in devices if d.key)
    fs = [facts[d.id] for d in devices if d.id in facts]
    forged = sum(f.counters.get("auth_forged", 0) for f in fs)
    replayed = sum(f.counters.get("auth_replayed", 0) for f in fs)
    unsigned = sum(f.counters.get("auth_unsigned", 0) for f in fs)
    boards = [f.health_auth for f in fs if f.health_auth is not None]
    bf = sum(h["auth_forged"] for h in boards)
    br = sum(h["auth_replayed"] for h in boards)
    bu = sum(h["auth_unsigned"] for h in boards)
    ok = signed == len(devices) and forged == 0 and unsigned == 0 and bu == 0
    return ok, (
        "%d/%d devices signed; bridge refused %d replays (netem's duplicate and late copies), %d forged, %d "
        "unsigned; boards (last health) refused %d forged (polls of a session before a power cut), %d "
        "replays, %d unsigned" % (signed, len(devices), replayed, forged, unsigned, bf, br, bu)
    )


def check_spark(report: Path, facts: dict[str, Facts]) -> tuple[bool, list[str]]:
    """The Spark job's devices table and summary equal the store, device by device."""
    import pyarrow.parquet as pq

    rows = {r["device_id"]: r for r in pq.read_table(report / "parquet" / "devices.parquet").to_pylist()}
    summary = json.loads((report / "summary.json").read_text())
    bad: list[str] = []
    for f in facts.values():
        r = rows.get(f.id)
        if r is None:
            bad.append("%s: missing in Spark's devices table" % f.id)
            continue
        want = {
            "unique": f.events,
            "messages": f.arrivals,
            "lead_eq1": f.lead[0],
            "lead_eq0": f.lead[1],
            "lead_gt1": f.lead[2],
            "lead_lt0": f.lead[3],
            # Spark's gaps never filled: seqs missing between received ones. The bridge also counts
            # exactly the events lost at the head of a boot, before its first stored event.
            "lost": f.gaps,
            "restarts": max(0, len(f.boots) - 1),
            "overruns": f.overruns,
            "events_lost_exact": f.lost_exact,
            "unknown_loss_recoveries": f.lost_unknown,
            "lead_mismatches": 0,
            "dup_flag_mismatches": 0,
        }
        diff = ["%s %s != %s" % (k, r.get(k), v) for k, v in want.items() if r.get(k) != v]
        if diff:
            bad.append("%s: %s" % (f.id, ", ".join(diff)))
    extra = set(rows) - set(facts)
    if extra:
        bad.append("Spark has devices the store has not: %s" % sorted(extra)[:5])
    tot = {
        "devices": len(facts),
        "unique": sum(f.events for f in facts.values()),
        "messages": sum(f.arrivals for f in facts.values()),
        "restarts": sum(max(0, len(f.boots) - 1) for f in facts.values()),
        "events_lost_exact": sum(f.lost_exact for f in facts.values()),
        "overruns": sum(f.overruns for f in facts.values()),
    }
    tdiff = ["%s %s != %s" % (k, summary.get(k), v) for k, v in tot.items() if summary.get(k) != v]
    if tdiff:
        bad.append("fleet summary: " + ", ".join(tdiff))
    msg = [
        "Spark's devices table equals the store for %d/%d devices (events, arrivals, lead buckets, gaps, "
        "restarts, overruns, exact and unknown losses); fleet totals %s"
        % (
            len(facts) - sum(1 for b in bad if not b.startswith("fleet")),
            len(facts),
            "equal" if not tdiff else "DIFFER",
        ),
        "Spark's gaps never filled %d + events lost before a boot's first stored event %d = the bridge's "
        "exact losses %d"
        % (
            sum(int(r.get("lost") or 0) for r in rows.values()),
            sum(f.lost_exact - f.gaps for f in facts.values()),
            sum(f.lost_exact for f in facts.values()),
        ),
    ]
    return not bad, msg + bad[:8]


# ------------------------------------------------------------------------------------ summary
HEAD = ("device", "link", "events", "lead=1", "=0", ">1", "<0", "lost", "unknown", "restarts", "truth")


def table_rows(devices: list[Device], facts: dict[str, Facts]) -> list[list[str]]:
    out = []
    for d in devices:
        f = facts.get(d.id) or Facts(d.id, d.transport)
        out.append(
            [
                d.id,
                "%s %s" % (d.kind, d.transport),
                str(f.events),
                *map(str, f.lead),
                str(f.lost_exact),
                str(f.lost_unknown),
                str(max(0, len(f.boots) - 1)),
                f.truth if f.truth_ok else "FAIL " + f.truth,
            ]
        )
    return out


def format_table(rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(HEAD[:-1])]
    lines = []
    for r in [list(HEAD), *rows]:
        cells = [r[0].ljust(widths[0]), r[1].ljust(widths[1])]
        cells += [c.rjust(w) for c, w in zip(r[2:-1], widths[2:], strict=True)]
        lines.append("  ".join(cells) + "  " + r[-1])
    return "\n".join(lines)


def group_row(name: str, devs: list[Device], facts: dict[str, Facts]) -> list[str]:
    fs = [facts[d.id] for d in devs if d.id in facts]
    ok = sum(f.truth_ok for f in fs)
    gen = sum(d.group.limit for d in devs if d.group)
    before = sum(f.before_contact or 0 for f in fs)
    return [
        "%s x%d" % (name, len(devs)),
        "sim udp",
        str(sum(f.events for f in fs)),
        *(str(sum(f.lead[i] for f in fs)) for i in range(4)),
        str(sum(f.lost_exact for f in fs)),
        str(sum(f.lost_unknown for f in fs)),
        str(sum(max(0, len(f.boots) - 1) for f in fs)),
        "%d/%d ok: %d generated, %d before contact" % (ok, len(fs), gen, before),
    ]


# ---------------------------------------------------------------------------------------- run
@dataclass
class Options:
    boards: int = 4
    simulated: int = 300
    seconds: float = 60.0
    out: Path = Path("demo-out")
    seed: int = 1
    spark: bool = True
    restart: bool = True
    spark_session: Any = None  # in-process callers (tests): run the job in this SparkSession


def _clean(out: Path) -> None:
    """Remove what an earlier demo wrote into `out` (only its own names: `out` may be anything)."""
    for name in (
        "store.db",
        "store.db-wal",
        "store.db-shm",
        "bridge.toml",
        "bridge.log",
        "fleet.log",
        "summary.txt",
        "summary.json",
        "pids.json",
        ".pids.json.tmp",
    ):
        with contextlib.suppress(FileNotFoundError):
            (out / name).unlink()
    for name in ("export", "report", "boards"):
        shutil.rmtree(out / name, ignore_errors=True)


def _wait_log(path: Path, needle: str, proc: subprocess.Popen[Any], timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.exists() and needle in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    tail = path.read_text(errors="replace")[-2000:] if path.exists() else ""
    raise DemoError("the bridge did not start (exit status %s):\n%s" % (proc.poll(), tail))


def _pump(stream: IO[str], log: IO[str], say: Progress) -> None:
    """Spark's output: everything to OUT/fleet.log, the job's own progress lines to stderr."""
    for line in stream:
        log.write(line)
        log.flush()
        if line.startswith("[fleet"):
            say("  " + line.rstrip())


@dataclass
class Outcome:
    checks: list[tuple[str, bool | None, str]] = field(default_factory=list)  # (name, ok/None=skipped, text)
    export_counts: dict[str, int] = field(default_factory=dict)
    spark_seconds: float = 0.0
    bridge_seconds: float = 0.0


class Demo:
    """The stages, in order; `run()` returns the exit status and always stops what it started."""

    def __init__(self, opts: Options, say: Progress, stdout: IO[str]) -> None:
        self.opts = opts
        self.say = say
        self.stdout = stdout
        self.out = opts.out.resolve()
        self.reaper = Reaper(self.out, uuid.uuid4().hex)
        self.netem: NetemHost | None = None
        self.devices: list[Device] = []
        self.vboards: dict[str, Any] = {}
        self.sim_procs: list[tuple[SimGroup, subprocess.Popen[Any]]] = []
        self.sim_generated: int | None = None
        self.restarted: str | None = None
        self.outcome = Outcome()

    @property
    def db(self) -> Path:
        return self.out / "store.db"

    def run(self) -> int:
        self.out.mkdir(parents=True, exist_ok=True)
        lock = (self.out / ".demo.lock").open("a+")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            self.say(
                "FAILED: another demo is running in %s (pid %s): give another --out"
                % (self.out, lock.read().strip() or "?")
            )
            lock.close()
            return 2
        lock.seek(0)
        lock.truncate()
        lock.write(str(os.getpid()))
        lock.flush()
        try:
            return self._run_locked()
        finally:
            lock.close()

    def _run_locked(self) -> int:
        _clean(self.out)
        self.reaper.install()
        try:
            return self._stages()
        except Interrupted as e:
            self.say("interrupted (%s): stopping everything the demo started" % e)
            return 128 + e.signum
        except DemoError as e:
            self.say("FAILED: %s" % e)
            return 3
        finally:
            self.reaper.ignore_signals()
            if self.netem is not None:
                with contextlib.suppress(Exception):
                    self.netem.stop()
            self.reaper.close()
            self.say(
                "cleanup: stopped every process the demo started (%d, list in %s)"
                % (len(self.reaper.pids), self.out / "pids.json")
            )
            self.reaper.uninstall()

    def _stages(self) -> int:
        from leadwire.tools.simdevice import raise_nofile

        raise_nofile()  # a few hundred devices: two sockets each in netem, one each in the simulators
        o = self.opts
        self.say(
            "leadwire demo: %d virtual boards, %d simulated devices, %g s of traffic, seed %d, out %s"
            % (o.boards, o.simulated, o.seconds, o.seed, self.out)
        )
        self.start_boards()
        self.start_sims()
        self.start_netem()
        self.run_bridge()
        self.stop_devices()
        self.export()
        spark = self.run_spark()
        return self.report(spark)

    # -- 1. boards
    def start_boards(self) -> None:
        if not self.opts.boards:
            return
        from leadwire.tools.board import BoardError
        from leadwire.tools.firmware_build import tool

        try:
            tool("micropython")
            tool("mpy-cross")
        except FileNotFoundError as e:
            raise DemoError(str(e)) from None
        t = time.monotonic()
        for i in range(self.opts.boards):
            transport = "udp" if i % 2 == 0 else "serial"
            name = "board-%d-%s" % (i + 1, transport)
            try:
                b = self.reaper.start_board(name, transport, self.out / "boards" / name, BOARD_CONFIG)
            except BoardError as e:
                raise DemoError("%s: %s" % (name, e)) from None
            target = "%s:%d" % b.address if transport == "udp" else b.port
            self.devices.append(Device(name, "board", transport, target, key=b.key))
            self.vboards[name] = b
            self.say(
                "board %s: micropython pid %d on %s (firmware compiled with mpy-cross, 64 KB heap)"
                % (name, b.pid, target)
            )
        self.say(
            "boards: %d up in %.1fs; each: 1 sensor channel at %d Hz, health every %d ms, ring %d"
            % (
                self.opts.boards,
                time.monotonic() - t,
                BOARD_CONFIG["sensors"][0]["hz"],
                BOARD_CONFIG["health"]["ms"],
                BOARD_CONFIG["ring"],
            )
        )

    # -- 2. simulated devices
    def start_sims(self) -> None:
        from leadwire.tools.simdevice import VirtualRing

        groups = plan_sims(self.opts.simulated, self.opts.seconds)
        for g in groups:
            cmd = [
                sys.executable,
                "-m",
                "leadwire.tools.simdevice",
                "--fast",
                "--devices",
                str(g.count),
                "--rate",
                str(g.rate),
                "--capacity",
                str(g.capacity),
                "--seed",
                str(self.opts.seed),
                "--payload",
                "16",
                "--limit",
                str(g.limit),
                "--first-index",
                str(g.first_index),
                "--auth",  # a random key per device, handed over on the pipe for bridge.toml
            ]
            p = self.reaper.popen("simdevice-" + g.name, cmd, stdout=subprocess.PIPE, text=True)
            self.sim_procs.append((g, p))
        self.gen_end = time.monotonic() + self.opts.seconds
        for g, p in self.sim_procs:
            assert p.stdout is not None
            line = p.stdout.readline()
            if not line:
                raise DemoError("the simulator (%s) did not start: exit status %s" % (g.name, p.wait()))
            g.devices = json.loads(line)["devices"]
            for k, dd in enumerate(g.devices):
                index = g.first_index + k
                # the simulator's ground truth: offset of event 0 (its seeded random start)
                start = VirtualRing(index, g.rate, g.capacity, 16, seed=self.opts.seed).start
                self.devices.append(
                    Device(
                        dd["id"],
                        "sim",
                        "udp",
                        dd["udp"],
                        group=g,
                        index=index,
                        start=start,
                        key=dd.get("key"),
                    )
                )
            self.say(
                "simulated %s: %d devices (pid %d), ring %d, %g events/s each, exactly %d events each"
                % (g.name, g.count, p.pid, g.capacity, g.rate, g.limit)
            )

    # -- 3. netem
    def start_netem(self) -> None:
        from leadwire.tools.netem import SerialImpairer, UdpImpairer, parse_address

        self.netem = NetemHost()
        t = time.monotonic()
        for k, d in enumerate(self.devices):
            prof = impairments(self.opts.seed, k)
            if d.transport == "udp":
                imp = UdpImpairer(("127.0.0.1", 0), parse_address(d.target), prof["udp_up"], prof["udp_down"])
                self.netem.add(d.id, "udp", imp)
                d.address = "%s:%d" % imp.address
            else:
                simp = SerialImpairer(d.target, prof["serial"])
                self.netem.add(d.id, "serial", simp)
                assert simp.port is not None
                d.address = simp.port
        p = impairments(self.opts.seed, 0)
        u, dn, s = p["udp_up"], p["udp_down"], p["serial"]
        self.say(
            "netem: %d proxies in %.1fs; UDP up loss %g dup %g reorder %g (+%g ms); down the same + "
            "corrupt %g; serial per byte loss %g (runs <= %d), per frame dup %g reorder %g; seeded"
            % (
                len(self.devices),
                time.monotonic() - t,
                u.loss,
                u.dup,
                u.reorder,
                u.reorder_ms,
                dn.corrupt,
                s.loss,
                s.loss_run,
                s.dup,
                s.reorder,
            )
        )

    # -- 4. the bridge
    def run_bridge(self) -> None:
        cfg = self.out / "bridge.toml"
        cfg.touch(mode=0o600)  # it holds the devices' keys
        cfg.chmod(0o600)
        cfg.write_text(bridge_toml(self.devices))
        log_path = self.out / "bridge.log"
        with log_path.open("w") as log:
            p = self.reaper.popen(
                "bridge",
                [sys.executable, "-m", "leadwire.cli", "bridge", "--config", str(cfg)],
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        _wait_log(log_path, "bridge_started", p, 60)
        t0 = time.monotonic()
        self.say(
            "bridge: pid %d polling %d devices into %s (config %s, JSON log %s)"
            % (p.pid, len(self.devices), self.db, cfg, log_path)
        )
        sims = [d for d in self.devices if d.kind == "sim"]
        gen_end = max(self.gen_end, t0 + (0 if sims else self.opts.seconds))
        restart_at = t0 + (gen_end - t0) / 2 if self.vboards and self.opts.restart else None
        small = {d.id for d in sims if d.group is not None and d.group.name == "small-ring"}
        blackout_at = t0 + (gen_end - t0) / 3 if small else None
        next_line = t0 + 5.0
        drain_deadline = gen_end + max(20.0, self.opts.seconds / 2)
        drained = (0, len(sims))
        while True:
            now = time.monotonic()
            if p.poll() is not None:
                raise DemoError(
                    "the bridge exited (status %s):\n%s"
                    % (p.returncode, log_path.read_text(errors="replace")[-2000:])
                )
            if restart_at is not None and now >= restart_at:
                restart_at = None
                name = list(self.vboards)[-1]
                self.say("restart: power cut and power on of %s (SIGKILL, same flash, new boot)" % name)
                self.reaper.restart_board(name, self.vboards[name])
                self.restarted = name
                self.say("restart: %s is up again, pid %d" % (name, self.vboards[name].pid))
            if blackout_at is not None and now >= blackout_at:
                blackout_at = None
                assert self.netem is not None
                n = self.netem.blackout(small, BLACKOUT_S)
                self.say(
                    "blackout: %g s link outage on the %d small-ring devices (their rings overrun)"
                    % (BLACKOUT_S, n)
                )
            if now >= gen_end:
                drained = sims_drained(self.db, sims)
                if drained[0] == drained[1] or now >= drain_deadline:
                    break
            if now >= next_line:
                next_line += 5.0
                self._progress(now, t0, gen_end, drained if now >= gen_end else None)
            time.sleep(0.25)
        self.say(
            "drained: %d/%d simulated devices have all their events; stopping netem, then the bridge"
            % drained
        )
        assert self.netem is not None
        self.netem.stop()
        time.sleep(0.5)  # what netem sent last is read by the bridge before it stops
        rc = Reaper.stop_group(p, signal.SIGTERM, 60.0)
        self.outcome.bridge_seconds = time.monotonic() - t0
        if rc != 0:
            raise DemoError("the bridge did not stop cleanly on SIGTERM (exit status %s)" % rc)
        self.say("bridge: stopped by SIGTERM, exit 0, after %.1fs" % self.outcome.bridge_seconds)

    def _progress(self, now: float, t0: float, gen_end: float, drained: tuple[int, int] | None) -> None:
        t = live_totals(self.db)
        n = self.netem.totals() if self.netem else {}
        lost = sum(v.get("lost", 0) for v in n.values())
        dup = sum(v.get("duplicated", 0) for v in n.values())
        held = sum(v.get("held", 0) for v in n.values())
        state = (
            "generating %.0f/%.0fs" % (now - t0, gen_end - t0)
            if drained is None
            else "draining %d/%d simulated devices done" % drained
        )
        if t is None:
            self.say("%s: store not written yet" % state)
            return
        self.say(
            "%s: %d events stored, %d duplicate arrivals, %d recoveries (%d lost exactly, %d unknown), "
            "%d boots; netem dropped %d, duplicated %d, held back %d"
            % (
                state,
                t["events"],
                t["dups"],
                t["recoveries"],
                t["lost"],
                t["unknown"],
                t["boots"],
                lost,
                dup,
                held,
            )
        )

    def stop_devices(self) -> None:
        for name, b in list(self.vboards.items()):
            self.reaper.boards.remove(b)
            b.close()
            self.say("board %s: powered off" % name)
        generated = 0
        for _, p in self.sim_procs:
            Reaper.stop_group(p, signal.SIGTERM, 10.0)
            assert p.stdout is not None
            for line in p.stdout.read().splitlines():
                with contextlib.suppress(ValueError):
                    generated += int(json.loads(line).get("generated", 0))
            self.reaper.procs = [(n, q) for n, q in self.reaper.procs if q is not p]
        if self.sim_procs:
            self.sim_generated = generated
            self.say("simulators: stopped; they report %d events generated" % generated)

    # -- 5. export and Spark
    def export(self) -> None:
        from leadwire.bridge.export import export

        t = time.monotonic()
        self.outcome.export_counts = export(str(self.db), self.out / "export")
        c = self.outcome.export_counts
        self.say(
            "export: %d arrivals, %d losses, %d boots as Parquet in %s (%.1fs)"
            % (c["arrivals"], c["losses"], c["boots"], self.out / "export", time.monotonic() - t)
        )

    def run_spark(self) -> bool | None:
        """True when the job ran; None when skipped (--no-spark, or no Java: said why)."""
        if not self.opts.spark:
            self.say("spark: skipped (--no-spark)")
            return None
        if self.opts.spark_session is not None:
            from leadwire.fleet.job import Progress as FleetProgress
            from leadwire.fleet.job import run_job

            t = time.monotonic()
            self.say("spark: the fleet job in the caller's SparkSession")
            run_job(
                str(self.out / "export"),
                str(self.out / "report"),
                self.opts.spark_session,
                window_seconds=10,
                progress=FleetProgress(stream=self.say.stream),
            )
            self.outcome.spark_seconds = time.monotonic() - t
            self.say("spark: done in %.1fs" % self.outcome.spark_seconds)
            return True
        if shutil.which("java") is None:
            self.say(
                "spark: SKIPPED: Java is missing (the fleet job needs Java 17: "
                "apt-get install openjdk-17-jre-headless)"
            )
            return None
        t = time.monotonic()
        cmd = [
            sys.executable,
            "-m",
            "leadwire.cli.demo",
            "--spark-child",
            str(self.out / "export"),
            str(self.out / "report"),
        ]
        self.say(
            "spark: the fleet job (leadwire.fleet.job.run_job) on local[2], in a subprocess (a JVM starts)"
        )
        with (self.out / "fleet.log").open("w") as log:
            p = self.reaper.popen("fleet", cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            assert p.stdout is not None
            pump = threading.Thread(target=_pump, args=(p.stdout, log, self.say), daemon=True)
            pump.start()
            rc = p.wait()
            pump.join(5)
        self.outcome.spark_seconds = time.monotonic() - t
        self.reaper.procs = [(n, q) for n, q in self.reaper.procs if q is not p]
        if rc != 0:
            log_path = self.out / "fleet.log"
            tail = log_path.read_text(errors="replace")[-1500:] if log_path.exists() else ""
            raise DemoError("the Spark fleet job failed (exit status %d):\n%s" % (rc, tail))
        self.say(
            "spark: done in %.1fs; report %s"
            % (self.outcome.spark_seconds, self.out / "report" / "index.html")
        )
        return True

    # -- 6. checks and summary
    def report(self, spark: bool | None) -> int:
        facts = read_facts(self.db)
        sims = [d for d in self.devices if d.kind == "sim"]
        boards = [d for d in self.devices if d.kind == "board"]
        checks = self.outcome.checks
        if sims:
            ok, msg = check_sims(self.db, sims, facts)
            checks.append(("simulator ground truth", ok, msg))
            want = sum(d.group.limit for d in sims if d.group)
            checks.append(
                (
                    "simulators' own count",
                    self.sim_generated == want,
                    "the simulators report %s events generated; %d planned" % (self.sim_generated, want),
                )
            )
        if boards:
            ok, msgs = check_boards(self.db, boards, facts, self.restarted)
            checks.append(
                (
                    "board ground truth",
                    ok,
                    "boards: %d/%d consistent with their own sample numbers and boot counters"
                    % (sum(facts[d.id].truth_ok for d in boards if d.id in facts), len(boards)),
                )
            )
            if self.restarted:
                f = facts.get(self.restarted)
                det = f.boots[1][2] if f and len(f.boots) == 2 else "not"
                ok_r = bool(f and len(f.boots) == 2 and f.restart_rows == 1)
                checks.append(
                    (
                        "restart detected",
                        ok_r,
                        "the restart of %s was detected (%s; boot counter %s); no other device restarted"
                        % (
                            self.restarted,
                            "by " + det if ok_r else "NOT detected",
                            " -> ".join(str(b[1]) for b in f.boots) if f else "?",
                        ),
                    )
                )
        assert self.netem is not None
        snaps = self.netem.snapshots()
        ok, msg = check_netem(facts, snaps)
        checks.append(("netem vs bridge", ok, msg))
        checks.append(("authentication", *check_auth(self.devices, facts)))
        stored_arrivals = sum(f.arrivals for f in facts.values())
        ec = self.outcome.export_counts
        checks.append(
            (
                "export",
                ec.get("arrivals") == stored_arrivals,
                "export wrote %d arrival rows; the store has %d" % (ec.get("arrivals", 0), stored_arrivals),
            )
        )
        if spark:
            ok, msgs = check_spark(self.out / "report", facts)
            checks.append(("spark vs store", ok, "; ".join(msgs)))
        else:
            checks.append(("spark vs store", None, "skipped: the Spark job did not run"))
        self.print_summary(facts, snaps, spark)
        return 0 if all(ok is not False for _, ok, _ in checks) else 1

    def print_summary(
        self, facts: dict[str, Facts], snaps: list[tuple[str, str, dict[str, Any]]], spark: bool | None
    ) -> None:
        o = self.opts
        boards = [d for d in self.devices if d.kind == "board"]
        sims = [d for d in self.devices if d.kind == "sim"]
        full = table_rows(self.devices, facts)
        (self.out / "summary.txt").write_text(format_table(full) + "\n")
        rows = table_rows(boards, facts)
        groups: dict[str, list[Device]] = {}
        for d in sims:
            assert d.group is not None
            groups.setdefault(d.group.name, []).append(d)
        rows += [group_row("sim " + name, devs, facts) for name, devs in groups.items()]
        worst = sorted(sims, key=lambda d: (-(facts[d.id].lost_exact if d.id in facts else 0), d.index))
        worst = [d for d in worst if d.id in facts and facts[d.id].lost_exact][:5]
        rows += table_rows(worst, facts)
        fs = list(facts.values())
        rows.append(
            [
                "fleet (%d devices)" % len(fs),
                "",
                str(sum(f.events for f in fs)),
                *(str(sum(f.lead[i] for f in fs)) for i in range(4)),
                str(sum(f.lost_exact for f in fs)),
                str(sum(f.lost_unknown for f in fs)),
                str(sum(max(0, len(f.boots) - 1) for f in fs)),
                "%d duplicate and late arrivals stored as such" % sum(f.arrivals - f.events for f in fs),
            ]
        )
        w = self.stdout.write
        w(
            "\nleadwire demo: %d boards (%d udp, %d serial), %d simulated devices, %g s, seed %d\n\n"
            % (
                len(boards),
                sum(d.transport == "udp" for d in boards),
                sum(d.transport == "serial" for d in boards),
                len(sims),
                o.seconds,
                o.seed,
            )
        )
        w(format_table(rows) + "\n")
        w(
            "  lead = seq - highest seq so far (spec 000): 1 in order, 0 or <0 a duplicate or late "
            "answer, >1 after a gap;\n"
            "  lost = events lost in ring overruns, counted exactly; unknown = recoveries of unknown size "
            "(first contact, restart);\n"
            "  every device: %s\n" % (self.out / "summary.txt")
        )
        for d in boards:
            f = facts.get(d.id)
            if f is not None and f.health:
                h = f.health
                w(
                    "  %s last health record: boot %s, up %s s, heap free %s B (low %s), ring overruns %s, "
                    "bad frames received %s\n"
                    % (
                        d.id,
                        h.get("boots"),
                        h.get("uptime_s"),
                        h.get("heap_free"),
                        h.get("heap_min"),
                        h.get("overruns"),
                        h.get("bad_frames"),
                    )
                )
        tot = netem_totals(snaps)
        w("\nnetem injected (seeded):\n")
        for key, t in sorted(tot.items()):
            if key.startswith("udp"):
                w(
                    "  %-11s %7d datagrams: lost %d, duplicated %d, held %d (%d overtaken), corrupted %d\n"
                    % (
                        key.replace("_", " "),
                        t.get("in", 0),
                        t.get("lost", 0),
                        t.get("duplicated", 0),
                        t.get("held", 0),
                        t.get("reordered", 0),
                        t.get("corrupted_out", 0),
                    )
                )
            else:
                w(
                    "  %-11s %7d bytes: %d loss runs (%d bytes), %d frames duplicated, %d held back\n"
                    % (
                        key.replace("_", " "),
                        t.get("in_bytes", 0),
                        t.get("loss_runs", 0),
                        t.get("lost_bytes", 0),
                        t.get("duplicated", 0),
                        t.get("held", 0),
                    )
                )
        w("\nchecks:\n")
        for name, ok, text in self.outcome.checks:
            w("  %s %s: %s\n" % ({True: "PASS", False: "FAIL", None: "SKIP"}[ok], name, text))
        if spark:
            w("\nreport: %s\n" % (self.out / "report" / "index.html"))
        failed = [n for n, ok, _ in self.outcome.checks if ok is False]
        w(
            "result: %s (%.0f s)\n"
            % (
                "FAILED: " + ", ".join(failed)
                if failed
                else "OK - every event stored once or counted lost, every count cross-checked",
                self.say.elapsed(),
            )
        )
        self.stdout.flush()


# ------------------------------------------------------------------------------------ command
@click.command()
@click.option(
    "--boards",
    default=4,
    show_default=True,
    type=click.IntRange(0, 16),
    help="Virtual boards (MicroPython unix port), alternately UDP and serial.",
)
@click.option(
    "--simulated",
    default=300,
    show_default=True,
    type=click.IntRange(0, 5000),
    help="Simulated devices (light simulator, UDP).",
)
@click.option(
    "--seconds",
    default=60.0,
    show_default=True,
    type=click.FloatRange(4, 3600),
    help="How long the devices generate events.",
)
@click.option(
    "--out",
    "out_dir",
    default="demo-out",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Output directory (store, export, report, logs).",
)
@click.option("--seed", default=1, show_default=True, help="Seed for netem and the simulators.")
@click.option("--no-spark", is_flag=True, help="Skip the Spark fleet job (quick runs).")
@click.option("--no-restart", is_flag=True, help="Do not restart a board midway.")
@click.option("--core", is_flag=True, help="Instead: the in-process protocol core demonstration.")
@click.option(
    "--events",
    default=5000,
    show_default=True,
    type=click.IntRange(10, 10_000_000),
    help="With --core: events generated.",
)
@click.option(
    "--capacity", default=64, show_default=True, type=click.IntRange(2, 65535), help="With --core: ring size."
)
def demo(
    boards: int,
    simulated: int,
    seconds: float,
    out_dir: str,
    seed: int,
    no_spark: bool,
    no_restart: bool,
    core: bool,
    events: int,
    capacity: int,
) -> None:
    """Run the whole system end to end: virtual boards and simulated devices behind netem, the
    bridge, export, the Spark fleet job; check every count against ground truth; print a summary."""
    if core:
        from leadwire.cli import core_demo

        sys.exit(core_demo.run(events, capacity, seed))
    if boards + simulated == 0:
        raise click.UsageError("nothing to run: give --boards or --simulated")
    opts = Options(boards, simulated, seconds, Path(out_dir), seed, not no_spark, not no_restart)
    sys.exit(Demo(opts, Progress(), sys.stdout).run())


def spark_child(argv: list[str]) -> int:
    """`python -m leadwire.cli.demo --spark-child EXPORT REPORT`: the fleet job (`run_job`) in a
    local[2] session sized for small data: adaptive query execution off and 2 shuffle partitions,
    as the fleet tests' session (`leadwire fleet`'s default session, with AQE on, takes 2-3 x as
    long on a demo-sized export: docs/operations.md). A subprocess, so the demo can stop its JVM."""
    if len(argv) != 3 or argv[0] != "--spark-child":
        print("usage: python -m leadwire.cli.demo --spark-child EXPORT_DIR REPORT_DIR", file=sys.stderr)
        return 2
    from leadwire.fleet.job import BadInput, Progress, build_session, format_summary, run_job

    prog = Progress()
    with prog.stage("start spark (local[2], adaptive execution off, 2 shuffle partitions)"):
        spark = build_session(
            "local[2]", 2, "1g", "leadwire-demo", adaptive=False, extra={"spark.default.parallelism": "2"}
        )
    try:
        summary = run_job(argv[1], argv[2], spark, window_seconds=10, progress=prog)
    except BadInput as e:
        print("fleet: %s" % e, file=sys.stderr)
        return 2
    finally:
        spark.stop()
    print(format_summary(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(spark_child(sys.argv[1:]))
