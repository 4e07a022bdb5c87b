"""The testbed: boards, simulated devices, netem proxies and the bridge, started and always stopped.

The demo (tools/demo_scenario.py), the chaos run (tools/chaos.py) and the benches are scenarios on
it. One :class:`Testbed` is a ``contextlib.ExitStack`` with one reaper: every process and proxy it
starts is registered the moment it exists and stopped when the ``with`` block ends, normally, on an
exception, or on SIGINT / SIGTERM (raised as :class:`Interrupted` in the main thread; held while a
process is being started and registered, so none can escape).

    with Testbed(out) as bed:                        # out: pids.json, bridge.toml, bridge.log
        b = bed.add_board("board-1-udp", "udp", cfg) # tools/board.py (any kind start_board offers)
        g = bed.add_sims("steady", count=10, rate=10, capacity=1024, limit=100)  # tools/simdevice.py
        addr = bed.netem.add_udp("board-1-udp", "%s:%d" % b.address, Impairment(loss=0.1))
        bridge = bed.bridge(bridge_config([Link("board-1-udp", "udp", addr, b.key)], store="store.db"))
        bridge.start(); bed.wait_until(lambda: ..., timeout=30); bridge.stop()

Children run in their own process groups (a terminal's Ctrl-C reaches only the scenario), carry
``MARKER_ENV`` in their environment (a test finds leftovers by it) and are listed in OUT/pids.json.
The bridge config is a dict checked by the bridge's own ``config.parse`` before it is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import IO, Any, NoReturn

from leadwire.bridge.config import parse as parse_config
from leadwire.bridge.store_reader import StoreReader
from leadwire.tools.firmware_build import tool
from leadwire.u32 import MASK as M32

__all__ = [
    "ALARM_CH", "HEALTH_CH", "M32", "SENSOR_CH", "Progress", "Testbed", "cannot_run", "format_table",
    "need_command", "need_tool", "tool",
]  # fmt: skip

SENSOR_CH = 1  # the boards' sensor channel (sample numbers: their ground truth)
HEALTH_CH = 8  # the health record (messages.decode_health / decode_health_auth)
ALARM_CH = 9
MARKER_ENV = "LEADWIRE_DEMO_RUN"  # set in every child's environment: a test finds leftovers by it


def cannot_run(why: str) -> NoReturn:
    """End a bench that cannot run on this machine: one line on stderr, what is missing and what to
    install, and exit status 2 (tests/bench skip on it, with that line). Benches install nothing."""
    print("%s: %s" % (Path(sys.argv[0]).stem, why), file=sys.stderr, flush=True)
    raise SystemExit(2)


def need_tool(name: str) -> str:
    """tool(name) (.venv/bin, then PATH), or cannot_run saying which pip install brings it."""
    try:
        return tool(name)
    except FileNotFoundError as e:
        cannot_run(str(e))


def need_command(name: str, package: str) -> str:
    """A system command (PATH, then /usr/sbin: root's tools, off a user's PATH), or cannot_run saying
    which Debian package has it."""
    exe = shutil.which(name) or (str(Path("/usr/sbin", name)) if Path("/usr/sbin", name).exists() else None)
    if exe is None:
        cannot_run("`%s` is missing: apt-get install %s" % (name, package))
    return exe


class TestbedError(RuntimeError):
    """A part could not start or stopped by itself: str(e) says why."""


class Interrupted(BaseException):
    """SIGINT or SIGTERM: unwinds to the cleanup."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


# ------------------------------------------------------------------------------- output helpers
class Progress:
    """Progress lines on stderr: ``[NAME   12.3s] message``."""

    def __init__(self, stream: IO[str] | None = None, name: str = "demo") -> None:
        self.t0 = time.monotonic()
        self.stream = stream or sys.stderr
        self.name = name

    def __call__(self, msg: str) -> None:
        print("[%s %6.1fs] %s" % (self.name, self.elapsed(), msg), file=self.stream, flush=True)

    def elapsed(self) -> float:
        return time.monotonic() - self.t0


def format_table(rows: list[list[str]], left: int = 2, free_last: bool = False) -> str:
    """Rows of cells (the first row the heading): the first `left` columns left-aligned, the others
    right-aligned; free_last: the last column is free text (not padded)."""
    ncol = len(rows[0]) - (1 if free_last else 0)
    widths = [max(len(r[i]) for r in rows) for i in range(ncol)]
    lines = []
    for r in rows:
        cells = [
            c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=False))
        ]
        lines.append("  ".join(cells + ([r[-1]] if free_last else [])))
    return "\n".join(lines)


# ------------------------------------------------------------------------------------ the reaper
def group_alive(pgid: int) -> bool:
    """A process of group pgid is alive (zombies count as gone: their parent reaps them)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
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


def stop_group(p: subprocess.Popen[Any], sig: int = signal.SIGTERM, timeout: float = 10.0) -> int | None:
    """Signal the process group of p, wait for p, then for the group to be empty (SIGKILL after the
    timeout). Returns p's exit status."""
    pgid = p.pid
    if p.poll() is None or group_alive(pgid):  # also when only the leader's children are left
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
    end = time.monotonic() + timeout
    with contextlib.suppress(subprocess.TimeoutExpired):
        p.wait(max(0.1, end - time.monotonic()))
    while time.monotonic() < end and group_alive(pgid):
        time.sleep(0.05)
    if group_alive(pgid) or p.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(5)
        end = time.monotonic() + 5
        while time.monotonic() < end and group_alive(pgid):
            time.sleep(0.05)
    return p.returncode


class Reaper:
    """The signal handling and the list of everything started (OUT/pids.json when out is given)."""

    def __init__(self, out: Path | None, run_id: str) -> None:
        self.out = out
        self.run_id = run_id
        self.pids: list[dict[str, Any]] = []
        self._held: int | None = None
        self._defer = 0
        self._old: dict[int, Any] = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers only in the main thread (the caller's own handling applies)
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old[sig] = signal.signal(sig, self._on_signal)

    def ignore(self) -> None:
        """During cleanup: a second Ctrl-C must not cut it short."""
        for sig in self._old:
            signal.signal(sig, signal.SIG_IGN)

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
        """Signals held until the block ends (a process started inside is registered first)."""
        self._defer += 1
        try:
            yield
        finally:
            self._defer -= 1
            if not self._defer and self._held is not None:
                signum, self._held = self._held, None
                raise Interrupted(signum)

    def env(self) -> dict[str, str]:
        return {**os.environ, MARKER_ENV: self.run_id, "PYTHONUNBUFFERED": "1"}

    def record(self, name: str, pid: int) -> None:
        self.pids.append({"name": name, "pid": pid})
        if self.out is None:
            return
        tmp = self.out / ".pids.json.tmp"
        tmp.write_text(json.dumps({"run": self.run_id, "demo_pid": os.getpid(), "procs": self.pids}))
        tmp.replace(self.out / "pids.json")


# ----------------------------------------------------------------------------------------- netem
class NetemHost:
    """Many impairers (tools/netem.py) on one asyncio loop in a daemon thread of this process."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="testbed-netem", daemon=True)
        self.thread.start()
        self.imps: list[tuple[str, str, Any]] = []  # (device id, kind "udp"/"serial", impairer)
        self.stopped_counts: list[tuple[str, str, dict[str, Any]]] | None = None

    def _add(self, device_id: str, kind: str, imp: Any) -> Any:
        asyncio.run_coroutine_threadsafe(imp.start(), self.loop).result(15)
        self.imps.append((device_id, kind, imp))
        return imp

    def add_udp(self, device_id: str, target: str | tuple[str, int], up: Any, down: Any = None) -> str:
        """A UDP proxy to target ("host:port"); returns its address for the bridge."""
        from leadwire.tools.netem import UdpImpairer, parse_address

        t = parse_address(target) if isinstance(target, str) else target
        imp = self._add(device_id, "udp", UdpImpairer(("127.0.0.1", 0), t, up, down))
        return "%s:%d" % imp.address

    def add_serial(self, device_id: str, port: str, up: Any, down: Any = None) -> str:
        """A serial proxy to the pty `port`; returns the new pty the bridge opens."""
        from leadwire.tools.netem import SerialImpairer

        imp = self._add(device_id, "serial", SerialImpairer(port, up, down))
        assert imp.port is not None
        return str(imp.port)

    def snapshots(self) -> list[tuple[str, str, dict[str, Any]]]:
        if self.stopped_counts is not None:
            return self.stopped_counts
        return [(d, k, imp.snapshot()) for d, k, imp in self.imps]

    def by_device(self) -> dict[str, dict[str, Any]]:
        return {d: s for d, _, s in self.snapshots()}

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
        """Stop every proxy (their counts kept for snapshots()) and the loop."""
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
    """Counts summed per link kind and direction ("udp_up", "serial_down", ...)."""
    tot: dict[str, dict[str, int]] = {}
    for _, kind, s in snaps:
        for direction in ("up", "down"):
            t = tot.setdefault("%s_%s" % (kind, direction), {})
            for k, v in s[direction].items():
                t[k] = t.get(k, 0) + int(v)
    return tot


# ------------------------------------------------------------------------------- bridge config
@dataclass
class Link:
    """One device as the bridge polls it."""

    id: str
    transport: str  # "udp" | "serial"
    address: str  # host:port or a pty path (netem's side when proxied)
    key: str | None = field(default=None, repr=False)  # hex auth key (a secret); None: auth off
    timestamp: str | None = None  # e.g. "prefix_us" (the simulators' payloads)


def bridge_config(
    links: list[Link], *, store: str, bridge: dict[str, Any], polling: dict[str, Any],
    store_opts: dict[str, Any] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """The bridge's config document (bridge.toml's content as a dict)."""
    devices = []
    for d in links:
        dev: dict[str, Any] = {"id": d.id, d.transport: d.address}
        if d.timestamp:
            dev["timestamp"] = d.timestamp
        dev.update({"key": d.key} if d.key else {"auth": False})
        devices.append(dev)
    return {
        "bridge": dict(bridge),
        "store": {"path": store, **(store_opts or {})},
        "polling": polling,
        "device": devices,
    }


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a TOML basic string: JSON's escapes are TOML's
    raise TypeError("no TOML for %r" % (v,))


def to_toml(doc: dict[str, Any]) -> str:
    """A bridge config dict as TOML: tables of scalars and arrays of tables (all the config has)."""
    lines: list[str] = []
    for name, t in doc.items():
        for table in t if isinstance(t, list) else [t]:
            lines += ["", "[[%s]]" % name if isinstance(t, list) else "[%s]" % name]
            lines += ["%s = %s" % (k, _toml_value(v)) for k, v in table.items()]
    return "\n".join(lines[1:]) + "\n"


def write_config(path: Path, doc: dict[str, Any], header: str = "") -> None:
    """Check `doc` with the bridge's own parser (ConfigError if it would refuse it), then write it
    as TOML, readable by the owner only (it holds the devices' keys)."""
    parse_config(doc, base=path.parent)
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(("# %s\n" % header if header else "") + to_toml(doc))


# ------------------------------------------------------------------------------------ the bridge
class BridgeProc:
    """`leadwire bridge --config CFG` as a subprocess: started, SIGKILLed, started again, stopped by
    SIGTERM; its stderr (the JSON log) appended to one log file across starts."""

    def __init__(self, bed: Testbed, cfg: Path, log: Path) -> None:
        self.bed = bed
        self.cfg = cfg
        self.log = log
        self.proc: subprocess.Popen[Any] | None = None
        self.starts = 0
        self.pids: list[int] = []
        log.write_text("")

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc else 0

    def log_tail(self, n: int = 2000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else ""

    def start(self, timeout: float = 60.0) -> None:
        """Start it and wait for its `bridge_started` log line."""
        with self.log.open("ab") as err:
            self.proc = self.bed.popen(
                "bridge",
                [sys.executable, "-m", "leadwire.cli", "bridge", "--config", str(self.cfg)],
                stdout=subprocess.DEVNULL,
                stderr=err,
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
        raise TestbedError(
            "the bridge did not start (exit status %s):\n%s" % (self.proc.poll(), self.log_tail())
        )

    def check(self) -> None:
        """TestbedError if the bridge has exited by itself."""
        if self.proc is not None and self.proc.poll() is not None:
            raise TestbedError("the bridge exited (status %s):\n%s" % (self.proc.returncode, self.log_tail()))

    def kill(self) -> None:
        """SIGKILL (the bridge process only: a crash, not a clean group stop)."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 60.0) -> int | None:
        """SIGTERM to its process group; its exit status (SIGKILL after the timeout)."""
        if self.proc is None:
            return None
        rc = stop_group(self.proc, signal.SIGTERM, timeout)
        self.bed.forget(self.proc)
        return rc


# ----------------------------------------------------------------------------- simulated devices
@dataclass
class SimGroup:
    """One simulator process (tools/simdevice.py --fast) serving `count` devices over UDP."""

    name: str
    count: int
    first_index: int
    rate: float
    capacity: int
    limit: int  # events generated per device, then it stops generating
    seed: int = 1
    payload: int = 16
    devices: list[dict[str, Any]] = field(default_factory=list)  # id, udp, key per device
    proc: subprocess.Popen[Any] | None = None

    def start_offset(self, index: int) -> int:
        """The offset of event 0 of device `index` (its seeded random start): ground truth."""
        from leadwire.tools.simdevice import VirtualRing

        return VirtualRing(index, self.rate, self.capacity, self.payload, seed=self.seed).start


# ---------------------------------------------------------------------------------- the testbed
class Testbed(contextlib.ExitStack):
    """See the module docstring. `out` holds pids.json, the bridge config and its log."""

    __test__ = False  # not a pytest class (its name starts with "Test")

    def __init__(self, out: Path) -> None:
        super().__init__()
        self.out = out
        self.reaper = Reaper(out, uuid.uuid4().hex)
        self.procs: list[tuple[str, subprocess.Popen[Any]]] = []
        self.boards: dict[str, Any] = {}
        self.sims: list[SimGroup] = []
        self._netem: NetemHost | None = None

    def __enter__(self) -> Testbed:
        super().__enter__()
        self.out.mkdir(parents=True, exist_ok=True)
        self.reaper.install()
        self.callback(self.reaper.uninstall)
        self.callback(self._stop_procs)  # callbacks run last-in first-out: processes stop last
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> bool:
        self.reaper.ignore()
        return super().__exit__(et, ev, tb)

    # -- processes
    def popen(self, name: str, cmd: list[str], **kw: Any) -> subprocess.Popen[Any]:
        """A child in its own process group, registered before any signal can interrupt."""
        with self.reaper.deferred():
            p: subprocess.Popen[Any] = subprocess.Popen(
                cmd, start_new_session=True, env=self.reaper.env(), **kw
            )
            self.procs.append((name, p))
            self.reaper.record(name, p.pid)
        return p

    def forget(self, p: subprocess.Popen[Any]) -> None:
        """p has been stopped by its owner."""
        self.procs = [(n, q) for n, q in self.procs if q is not p]

    def _stop_procs(self) -> None:
        for _, p in reversed(self.procs):
            with contextlib.suppress(Exception):
                stop_group(p, signal.SIGTERM, 5.0)
        self.procs = []

    # -- boards
    def add_board(self, name: str, transport: str, config: dict[str, Any], board_dir: Path | None = None,
                  key: str | None = "auto", **kw: Any) -> Any:  # fmt: skip
        """A virtual board (tools/board.py start_board: "udp", "serial", or any kind it offers) on
        its flash `board_dir` (OUT/boards/NAME by default); closed when the testbed ends."""
        from leadwire.tools.board import start_board

        d = board_dir or self.out / "boards" / name
        with self.reaper.deferred():
            b = start_board(transport, config=config, board_dir=d, key=key, **kw)
            self.boards[name] = b
            self.callback(self._close_board, name, b)
            self.reaper.record(name, b.pid)
        return b

    def _close_board(self, name: str, b: Any) -> None:
        if self.boards.get(name) is b:
            with contextlib.suppress(Exception):
                b.close()
            del self.boards[name]

    def restart_board(self, name: str) -> Any:
        """A power cut and power on (same flash, a new boot)."""
        b = self.boards[name]
        with self.reaper.deferred():
            b.restart()
            self.reaper.record(name, b.pid)
        return b

    def close_board(self, name: str) -> None:
        """Power a board off now."""
        self._close_board(name, self.boards[name])

    # -- simulated devices
    def add_sims(self, g: SimGroup, auth: bool = True) -> SimGroup:
        """Start the simulator process of group g (`--limit` events per device); g.devices is filled
        when ready() has read its first line."""
        args = {"devices": g.count, "rate": g.rate, "capacity": g.capacity, "seed": g.seed,
                "payload": g.payload, "limit": g.limit, "first-index": g.first_index}  # fmt: skip
        cmd = [sys.executable, "-m", "leadwire.tools.simdevice", "--fast"]
        for k, v in args.items():
            cmd += ["--" + k, str(v)]
        if auth:
            cmd.append("--auth")  # a random key per device, handed over on the pipe
        g.proc = self.popen("simdevice-" + g.name, cmd, stdout=subprocess.PIPE, text=True)
        self.sims.append(g)
        return g

    def sims_ready(self, g: SimGroup) -> None:
        assert g.proc is not None and g.proc.stdout is not None
        line = g.proc.stdout.readline()
        if not line:
            raise TestbedError("the simulator (%s) did not start: exit status %s" % (g.name, g.proc.wait()))
        g.devices = json.loads(line)["devices"]

    def stop_sims(self) -> int:
        """Stop every simulator; the events they report generated, in total."""
        generated = 0
        for g in self.sims:
            if g.proc is None:
                continue
            stop_group(g.proc, signal.SIGTERM, 10.0)
            assert g.proc.stdout is not None
            for line in g.proc.stdout.read().splitlines():
                with contextlib.suppress(ValueError):
                    generated += int(json.loads(line).get("generated", 0))
            self.forget(g.proc)
        return generated

    # -- netem and the bridge
    @property
    def netem(self) -> NetemHost:
        if self._netem is None:
            self._netem = NetemHost()
            self.callback(self._netem.stop)
        return self._netem

    def bridge(self, doc: dict[str, Any], header: str = "written by the testbed") -> BridgeProc:
        """The bridge with this config (checked, written to OUT/bridge.toml); not started yet."""
        cfg = self.out / "bridge.toml"
        write_config(cfg, doc, header)
        return BridgeProc(self, cfg, self.out / "bridge.log")

    # -- waiting and reading
    @staticmethod
    def wait_until(done: Callable[[], bool], timeout: float, every: float = 0.25) -> bool:
        """Poll `done` until it is true (True) or the timeout (False)."""
        end = time.monotonic() + timeout
        while True:
            if done():
                return True
            if time.monotonic() >= end:
                return False
            time.sleep(every)

    @staticmethod
    def drained(db: Path, last: dict[str, Any], done: set[str]) -> set[str]:
        """Add to `done` the devices whose last event the store has: device id -> its offset n (the
        device's highest offset), or (boot epoch, offset) (that event stored). Returns `done`."""
        r = StoreReader.open(db)
        if r is None:
            return done
        with r:
            devs = {d.device_id: d for d in r.devices()}
            for name, want in last.items():
                d = devs.get(name)
                if name in done or d is None:
                    continue
                if isinstance(want, tuple):
                    if r.has_event(d.dev, *want):
                        done.add(name)
                elif d.has_n and d.n == want & M32:
                    done.add(name)
        return done

    def wait_drained(self, db: Path, last: dict[str, Any], timeout: float) -> set[str]:
        """Wait until drained() has every device of `last`; the devices drained by the timeout."""
        done: set[str] = set()
        self.wait_until(lambda: len(self.drained(db, last, done)) == len(last), timeout)
        return done
