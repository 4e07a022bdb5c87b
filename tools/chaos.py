"""The chaos run: virtual boards through netem, boards and the bridge killed at random, and a
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

The checker (tools/chaos_check.py) takes each board's record as ground truth and puts every generated
event in exactly one class: stored, lost (counted), before contact, died with boot, or SILENT (fails
the run); it also fails the run on corrupted, duplicate or phantom events, double accounting and
undetected restarts. The processes run on the testbed (tools/testbed.py): all stopped on exit.

From Python (tests/chaos, bench/chaos_bench.py)::

    res = run(ChaosOptions(out=tmp, boards=default_boards(3), seconds=60, board_kills=2, bridge_kills=2))
    print(res.table()); assert res.ok
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import click

from leadwire.bridge.store_reader import StoreReader
from leadwire.tools.chaos_check import CLASSES, Tally, Trace, TraceBoot, check, check_board, format_table
from leadwire.tools.testbed import (
    ALARM_CH,
    HEALTH_CH,
    SENSOR_CH,
    BridgeProc,
    Interrupted,
    Link,
    Testbed,
    TestbedError,
    bridge_config,
)

__all__ = ["CLASSES", "ChaosOptions", "ChaosResult", "Tally", "Trace", "TraceBoot", "check", "check_board",
           "default_boards", "report", "run"]  # fmt: skip

Say = Callable[[str], None]


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


def bridge_doc(db: Path, links: list[Link], frames: int = 4) -> dict[str, Any]:
    """The bridge config: every board behind its netem proxy (key per board, or auth off)."""
    polling = {"interval": 0.02, "interval_min": 0.005, "interval_max": 0.1, "timeout": 0.15,
               "backoff_max": 0.5, "hello_interval": 5.0,
               "frames": frames}  # burst polls: a serial answer frame (256 B) holds ~12 events  # fmt: skip
    return bridge_config(links, store=str(db), store_opts={"commit_interval": 0.05},
                         bridge={"id": "chaos", "metrics": ""}, polling=polling)  # fmt: skip


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


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _stored_count(db: Path) -> int:
    r = StoreReader.open(db)
    if r is None:
        return 0
    with r:
        return r.event_count()


def _setup(bed: Testbed, opts: ChaosOptions, out: Path, say: Say) -> tuple[dict[str, Trace], BridgeProc]:
    """Boards (held by their `pause` file, each with its record), one netem proxy each, the bridge."""
    traces: dict[str, Trace] = {}
    for spec in opts.boards:
        d = out / "boards" / spec.name
        for fname in ("trace", "pause", "boots", "console.log"):
            (d / fname).unlink(missing_ok=True)
        d.mkdir(parents=True, exist_ok=True)
        (d / "trace").touch()
        (d / "pause").touch()  # nothing generated before the bridge is up
        bed.add_board(spec.name, spec.transport, board_config(spec), d, key="auto" if opts.auth else None)
        traces[spec.name] = Trace(d / "trace")
    say("chaos: %d boards up (%s)" % (len(traces), ", ".join(
        "%s ring %d, %d Hz" % (s.name, s.ring, s.hz) for s in opts.boards)))  # fmt: skip
    links = []
    for k, spec in enumerate(opts.boards):
        prof = impairments(opts, k)
        b = bed.boards[spec.name]
        if spec.transport == "udp":
            addr = bed.netem.add_udp(spec.name, b.address, prof["udp"])
        else:
            addr = bed.netem.add_serial(spec.name, b.port, prof["serial_up"], prof["serial_down"])
        links.append(Link(spec.name, spec.transport, addr, b.key))
    p = impairments(opts, 0)
    say(
        "chaos: netem loss %g dup %g reorder %g corrupt %g, seed %d (UDP per datagram; serial "
        "dup/reorder per frame, loss/corrupt per byte: up %.5f/%.6f, down %.5f/%.6f)"
        % (opts.loss, opts.dup, opts.reorder, opts.corrupt, opts.seed, p["serial_up"].loss,
           p["serial_up"].corrupt, p["serial_down"].loss, p["serial_down"].corrupt)
    )  # fmt: skip
    bridge = bed.bridge(bridge_doc(out / "store.db", links, opts.frames), "written by tools/chaos.py")
    bridge.start()
    say("chaos: bridge up (pid %d), store %s" % (bridge.pid, out / "store.db"))
    return traces, bridge


def _generate(bed: Testbed, opts: ChaosOptions, traces: dict[str, Trace], bridge: BridgeProc,
              faults: list[Fault], cuts: dict[str, int], say: Say) -> None:  # fmt: skip
    """The boards generate (pause files gone) while the faults happen on schedule."""
    for spec in opts.boards:
        (bed.out / "boards" / spec.name / "pause").unlink()
    t0 = time.monotonic()
    next_line = t0 + opts.progress_every
    pending = list(faults)
    while True:
        now = time.monotonic()
        el = now - t0
        generated = sum(tr.update() for tr in traces.values())
        if (opts.events and generated >= opts.events) or (not opts.events and el >= opts.seconds):
            return
        if pending and el >= pending[0].at:
            f = pending.pop(0)
            f.done_at = el
            if f.kind == "board":
                b = bed.restart_board(f.board)
                cuts[f.board] += 1
                say("chaos: %6.1fs power cut + power on of %s (pid %d)" % (el, f.board, b.pid))
            else:
                bridge.kill()
                say("chaos: %6.1fs bridge SIGKILLed, down %.1fs" % (el, f.down))
                time.sleep(f.down)
                bridge.start()
                say("chaos: %6.1fs bridge started again (pid %d)" % (time.monotonic() - t0, bridge.pid))
            continue
        if now >= next_line:
            next_line += opts.progress_every
            stored = _stored_count(bed.out / "store.db")
            done = len(faults) - len(pending)
            say(
                "chaos: %6.1fs generated %d, stored %d, faults %d/%d"
                % (el, generated, stored, done, len(faults))
            )
        bridge.check()
        time.sleep(0.1)


def _quiesce_and_drain(bed: Testbed, opts: ChaosOptions, traces: dict[str, Trace], say: Say) -> float:
    """Hold the boards (pause files) until every record stops growing, then wait until the store has
    each board's last event; returns the seconds this took."""
    for spec in opts.boards:
        (bed.out / "boards" / spec.name / "pause").touch()
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
    say("chaos: boards quiesced: %d events generated; draining" % sum(sizes.values()))
    last: dict[str, Any] = {}
    for name, tr in traces.items():
        bs = tr.final_boots()
        if bs and len(bs[-1]):
            last[name] = (bs[-1].epoch, bs[-1].offset(len(bs[-1]) - 1))
    drained = bed.wait_drained(
        bed.out / "store.db", last, max(0.0, opts.drain_timeout - (time.monotonic() - t1))
    )
    secs = time.monotonic() - t1
    say("chaos: drained %d/%d boards in %.1fs" % (len(drained) + len(traces) - len(last), len(traces), secs))
    return secs


def run(opts: ChaosOptions, say: Say = _stderr) -> ChaosResult:
    """The whole chaos run (boards, netem, bridge, faults, quiesce, drain, check). Every process it
    starts is stopped before it returns, also on an exception."""
    out = opts.out.resolve()  # absolute: the bridge reads paths relative to its config file
    for stale in ("store.db", "store.db-wal", "store.db-shm", "bridge.log"):
        (out / stale).unlink(missing_ok=True)
    t_start = time.monotonic()
    cuts: dict[str, int] = {b.name: 0 for b in opts.boards}
    secs: dict[str, float] = {}
    with Testbed(out) as bed:
        traces, bridge = _setup(bed, opts, out, say)
        nominal = sum(s.hz + 1 for s in opts.boards)
        faults = plan_faults(opts, opts.events / nominal if opts.events else opts.seconds)
        say("chaos: %s" % ", ".join(
            "%.1fs %s" % (f.at, ("cut " + f.board) if f.kind == "board" else "bridge kill %.1fs" % f.down)
            for f in faults) if faults else "chaos: no faults")  # fmt: skip
        t0 = time.monotonic()
        secs["setup"] = t0 - t_start
        _generate(bed, opts, traces, bridge, faults, cuts, say)
        secs["generate"] = time.monotonic() - t0
        secs["drain"] = _quiesce_and_drain(bed, opts, traces, say)
        rc = bridge.stop(30.0)
        if rc != 0:
            say("chaos: the bridge exited with status %s on SIGTERM" % rc)
        net = bed.netem.by_device()
        pids = [p["pid"] for p in bed.reaper.pids]
    secs["total"] = time.monotonic() - t_start
    t2 = time.monotonic()
    tallies = check(out / "store.db", traces, cuts)
    secs["check"] = time.monotonic() - t2
    o = asdict(opts)
    o["out"] = str(opts.out)
    return ChaosResult(o, tallies, faults, net, secs, bridge.starts, pids)


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
@click.option(
    "--boards",
    type=click.IntRange(1, 16),
    default=3,
    show_default=True,
    help="Virtual boards (UDP, serial, ...).",
)
@click.option(
    "--hz", type=click.IntRange(1, 100000), default=100, show_default=True, help="Sensor rate per board."
)
@click.option("--seconds", type=click.FloatRange(1, 86400), default=60.0, show_default=True)
@click.option(
    "--events", type=click.IntRange(0), default=0, help="Generate this many events instead of --seconds."
)
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
    try:
        res = run(opts)
    except Interrupted as e:
        click.echo("chaos: interrupted (%s): everything it started is stopped" % e, err=True)
        sys.exit(128 + e.signum)
    except TestbedError as e:
        click.echo("chaos: %s" % e, err=True)
        sys.exit(3)
    (Path(out) / "result.json").write_text(json.dumps(res.as_dict(), indent=1))
    print(report(res))
    sys.exit(0 if res.ok else 1)
