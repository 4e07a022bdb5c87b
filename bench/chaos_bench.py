"""Chaos benchmark: 1M events from virtual boards through netem (10% loss, 5% duplication,
5% reordering, 1% corruption), boards power-cut and the bridge SIGKILLed at seeded random times, and
the accounting table: every generated event stored once, counted lost, lost before the bridge reached
its boot, or died with its boot; nothing silent, duplicated or corrupted.

Run:
    .venv/bin/python bench/chaos_bench.py            # 1,000,000 events (~11 min)
    .venv/bin/python bench/chaos_bench.py --quick    # 100,000 events (~1.5 min)

4 boards: UDP at 600 Hz, serial at 200 Hz (a serial link under this impairment does not keep up
with much more: its ring overruns, counted), 16-byte samples, a health record every second.

Prints the table, the per-boot accounting, the ratios (each class as a share of what was generated,
events that died per power cut, the bridge's bad-frame count against the corrupted frames netem sent)
and writes bench/out/chaos/result.json. Exit status 1 if the checker finds anything unaccounted.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import click

from leadwire.tools.chaos import ChaosOptions, default_boards, report, run

ROOT = Path(__file__).resolve().parents[1]

# the device-side record's cost on the board's interpreter: EventRing.write with and without the
# unix board's trace wrapper, side by side in one MicroPython process (64 KB heap), 16-byte events
RECORD_COST = """
import time
from leadwire.ring import EventRing as Plain
from boards import unix
from leadwire import ring
Traced = ring.EventRing
p = bytearray(16)
def run(cls, n):
    r = cls(512, None, 16, 1)
    t = time.ticks_us()
    for i in range(n):
        r.write(p, 1, 16)
    return time.ticks_diff(time.ticks_us(), t) / n
for k in range(5):
    a = run(Plain, 20000)
    b = run(Traced, 20000)
    print(a, b)
"""


def record_cost() -> tuple[float, float]:
    """Median us per ring write without and with the record (5 pairs of 20,000 writes)."""
    import os
    import statistics
    import subprocess
    import tempfile

    from leadwire.tools.firmware_build import tool

    with tempfile.TemporaryDirectory() as d:
        Path(d, "trace").touch()
        env = dict(os.environ, MICROPYPATH="%s:%s" % (ROOT / "shared", ROOT / "firmware"))
        out = subprocess.run([tool("micropython"), "-X", "heapsize=64K", "-c", RECORD_COST], cwd=d, env=env,
                             capture_output=True, text=True, timeout=120, check=True).stdout  # fmt: skip
    pairs = [tuple(map(float, line.split())) for line in out.split("\n") if line.strip()]
    return statistics.median(x[0] for x in pairs), statistics.median(x[1] for x in pairs)


@click.command(help=__doc__.split("\n\n")[0])
@click.option("--quick", is_flag=True, help="100,000 events instead of 1,000,000")
@click.option("--events", type=int, default=0, help="events to generate (default 1M, --quick 100k)")
@click.option("--boards", type=int, default=4, show_default=True)
@click.option("--hz", type=int, default=600, show_default=True, help="sensor rate of a UDP board")
@click.option("--serial-hz", type=int, default=200, show_default=True, help="sensor rate of a serial board")
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--no-auth", is_flag=True, help="auth = false (default: a key per board)")
@click.option("--out", default=str(ROOT / "bench" / "out" / "chaos"), show_default=True)
def main(**kw: Any) -> None:
    sys.exit(bench(SimpleNamespace(**kw)))


def bench(a: Any) -> int:
    events = a.events or (100_000 if a.quick else 1_000_000)
    boards = default_boards(a.boards, a.hz)
    for i, b in enumerate(boards):
        if b.transport == "serial":
            b.hz = a.serial_hz
        b.ring = 256 if i % 3 == 2 else 512  # 0.4-0.9 s of events: a bridge outage overruns them
    duration = events / sum(b.hz + 1 for b in boards)
    # about one board power cut per 20 s and one bridge SIGKILL per 40 s of generation
    opts = ChaosOptions(
        out=Path(a.out),
        boards=boards,
        events=events,
        board_kills=max(2, round(duration / 20)),
        bridge_kills=max(2, round(duration / 40)),
        seed=a.seed,
        progress_every=30.0,
        auth=not a.no_auth,
    )
    print(
        "chaos_bench: %d events from %d boards (%s); %d power cuts, %d bridge kills; auth %s; seed %d"
        % (events, a.boards, ", ".join("%s %d Hz ring %d" % (b.transport, b.hz, b.ring) for b in boards),
           opts.board_kills, opts.bridge_kills, "on" if opts.auth else "off", a.seed),
        flush=True,
    )  # fmt: skip
    plain, traced = record_cost()
    print(
        "record cost: ring write %.1f us, with the record %.1f us (ratio %.2f; +%.1f us per event, one "
        "write() syscall), median of 5 x 20,000 on the board's interpreter" % (plain, traced, traced / plain,
                                                                              traced - plain),
        flush=True,
    )  # fmt: skip
    t0 = time.monotonic()
    res = run(opts)
    wall = time.monotonic() - t0
    print(report(res))
    t = res.total
    g = max(t.generated, 1)
    cuts = max(t.restarts_made, 1)
    udp = [s["down"] for s in res.netem.values() if "corrupted_out" in s["down"]]
    udp_corrupt = sum(d["corrupted_out"] for d in udp)
    udp_dup = sum(d["duplicated"] for d in udp)
    udp_crc = sum(x.crc_errors for x in res.tallies if x.transport == "udp")
    udp_auth = sum(x.auth_rejects for x in res.tallies if x.transport == "udp")
    print()
    print("ratios (of %d generated):" % t.generated)
    for k in ("stored", "lost", "before_contact", "died_with_boot", "silent"):
        print("  %-15s %9d  %8.4f %%" % (k, getattr(t, k), 100.0 * getattr(t, k) / g))
    print(
        "  died with boot per power cut: %.1f events (%d cuts)" % (t.died_with_boot / cuts, t.restarts_made)
    )
    print(
        "  UDP answers: netem corrupted %d, the bridge counted %d CRC rejects (ratio %.2f); netem duplicated "
        "%d, the bridge rejected %d as replays/forgeries (auth); counters as committed before each SIGKILL"
        % (udp_corrupt, udp_crc, udp_crc / max(udp_corrupt, 1), udp_dup, udp_auth)
    )
    print(
        "  rate: %.0f events/s generated over %.1fs of generation; wall %.1fs"
        % (t.generated / max(res.seconds.get("generate", 1), 1e-9), res.seconds.get("generate", 0), wall)
    )
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json").write_text(json.dumps(res.as_dict(), indent=1))
    print("result: %s (%s)" % ("OK" if res.ok else "FAIL", out / "result.json"))
    return 0 if res.ok else 1


if __name__ == "__main__":
    main()
