"""Measure one virtual board: heap at 64K, events/s under burst polls over UDP and serial, and
where the board's time goes.

    .venv/bin/python -m tests.firmware.bench_board [--seconds 3] [--repeat 3] [--frames 16]
        [--rates 25000,50000,100000,0] [--ring 264] [--size 64] [--transports udp,serial]

For each transport and generation rate, a board (64 KB heap, ring 264 x 64 B over UDP, 232 x 64 B over
serial, frames of 1,472 B,
report bodies of 64 B: the heap reserve for push sessions goes to the ring)
runs one sensor channel of `size`-byte events at that rate (0: as fast as it can, `"hz": 0`); the
host is the core's PollClient asking for bursts of `frames` EVENTS frames per POLL, as fast as
answers come back, for `seconds` after a 0.5 s warm-up. Reported per run, and as the median of
`repeat` runs (the machine is shared: figures are noisy):

  delivered/s   events received (each one acknowledged by the next POLL's offset)
  lost/s        events the ring overwrote before they were polled (exact: PollClient.lost)
  generated/s   delivered + lost: what the board's source actually produced
  frames/poll   answer frames per round trip; ev/frame events per frame
  board_cpu     the board process's CPU (utime + stime from /proc) as a share of one core, and
                per delivered event (us); host_cpu the client's
Then `agent_cost.py` on the board's interpreter: microseconds per event (ring write, sample +
emit) and per frame (answer_into, UDP sendto, COBS encode), best of 5.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import click

from leadwire import wire
from leadwire.client import PollClient
from leadwire.tools.board import free_udp_port, start_board
from leadwire.tools.firmware_build import build, tool
from leadwire.tools.procstat import cpu_seconds
from leadwire.tools.wireclient import Client, SerialLink, UdpLink

HERE = Path(__file__).resolve().parent
ANSWERS = [wire.HELLO, wire.EVENTS, wire.NO_EVENT, wire.RECOVERY]


def run(transport: str, rate: int, seconds: float, frames: int, ring: int, size: int) -> dict[str, object]:
    cfg = {
        "ring": ring,
        "slot": size,
        "sensors": [{"ch": 1, "hz": rate, "size": size}],
        "health": {"ms": 0},
        "tick": 0,  # the io loop never sleeps: a poll is answered at once (no 1 ms idle tick)
        "report": {"bytes": 64},  # polled only: the smallest push-session reserve, room for the ring
        "udp": {"frame": 1472},
        "serial": {"frame": 1472},
    }
    with start_board(transport, config=cfg) as b:
        assert "ring %dx%d, links" % (ring, size) in b.console(), b.console()  # the ring did fit
        link = UdpLink(b.address) if transport == "udp" else SerialLink(str(b.port))  # type: ignore[arg-type]
        c = Client(link)
        pc = PollClient()
        got = lost = polls = nframes = 0
        t0 = warm = time.monotonic() + 0.5
        counting = False
        while time.monotonic() < warm + seconds:
            if not counting and time.monotonic() >= warm:
                counting = True
                got, lost, polls, nframes = pc.received, pc.lost, 0, 0
                t0 = time.monotonic()
                c0, h0 = cpu_seconds(b.pid) or 0.0, time.process_time()
            c.send(pc.next_request(wire.MAX_BATCH, wire.MAX_PAYLOAD, frames))
            polls += 1
            while not pc.burst_done:
                f = c.recv(ANSWERS, 1.0)
                if f is None:
                    pc.on_timeout()
                    break
                nframes += 1
                pc.on_frame(f)
        dt = time.monotonic() - t0
        board_cpu = (cpu_seconds(b.pid) or 0.0) - c0
        host_cpu = time.process_time() - h0
        c.close()
    got = pc.received - got
    lost = pc.lost - lost
    return {
        "transport": transport,
        "rate": rate or "max",
        "delivered_per_s": round(got / dt),
        "lost_per_s": round(lost / dt),
        "generated_per_s": round((got + lost) / dt),
        "polls_per_s": round(polls / dt),
        "frames_per_poll": round(nframes / max(polls, 1), 1),
        "events_per_frame": round(got / max(nframes, 1), 1),
        "board_cpu": round(board_cpu / dt, 2),
        "board_us_per_event": round(1e6 * board_cpu / max(got, 1), 1),
        "host_cpu": round(host_cpu / dt, 2),
        "timeouts": pc.transport_errors,
    }


def ready_heap() -> str:
    with start_board("both") as b:
        return next(ln for ln in b.console().splitlines() if "ready" in ln)


def costs() -> dict[str, float]:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d)
        build("unix", out)
        src = HERE / "agent_cost.py"
        cross = [tool("mpy-cross"), "-march=x64"]
        subprocess.run([*cross, "-o", str(out / "agent_cost.mpy"), str(src)], check=True)
        r = subprocess.run(
            [tool("micropython"), "-X", "heapsize=64K", "-m", "agent_cost", str(free_udp_port())],
            cwd=d,
            env={"MICROPYPATH": ".frozen:", "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        )
    return {ln.split()[1]: float(ln.split()[2]) for ln in r.stdout.splitlines() if ln.startswith("cost ")}


@click.command()
@click.option("--seconds", type=float, default=3.0, show_default=True)
@click.option("--repeat", type=int, default=3, show_default=True)
@click.option("--frames", type=int, default=16, show_default=True, help="max_frames per POLL (1..32)")
@click.option(
    "--rates", default="25000,50000,100000,0", show_default=True, help="events/s; 0 = as fast as it can"
)
@click.option("--ring", type=int, default=264, show_default=True, help="ring slots over UDP")
@click.option(
    "--serial-ring", type=int, default=232, show_default=True, help="over serial (its COBS buffer takes heap)"
)
@click.option("--size", type=int, default=64, show_default=True)
@click.option("--transports", default="udp,serial", show_default=True)
@click.option("--no-costs", is_flag=True)
def main(
    seconds: float, repeat: int, frames: int, rates: str, ring: int, serial_ring: int, size: int,
    transports: str, no_costs: bool,
) -> None:  # fmt: skip
    """Events/s and CPU of one unix-port board over UDP and serial, medians of --repeat runs."""
    print("both transports, default config:", ready_heap(), flush=True)
    if not no_costs:
        print("costs (us):", json.dumps(costs()), flush=True)
    for transport in transports.split(","):
        for rate in (int(r) for r in rates.split(",")):
            slots = ring if transport == "udp" else serial_ring
            runs = [run(transport, rate, seconds, frames, slots, size) for _ in range(repeat)]
            for r in runs:
                print("  run", json.dumps(r), flush=True)
            med = dict(runs[0])
            for key, v in runs[0].items():
                if isinstance(v, int | float) and key != "rate":
                    med[key] = statistics.median(float(r[key]) for r in runs)  # type: ignore[arg-type]
            print("median", json.dumps(med), flush=True)


if __name__ == "__main__":
    main()
