"""The leadwire receiver of bench/peer_mqtt_bench.py: the bridge (host/bridge, unchanged) polling one
virtual board over UDP into its SQLite store, then the store's own accounting of the run.

    python lw_host.py --board 127.0.0.1:PORT --store lw.db --events N --seconds S [--timeout T]

Runs the public ``leadwire.bridge.daemon.Bridge`` in this process (as ``leadwire bridge --config``
does), stops it when N events of channel 1 are committed or after S seconds, and prints one JSON
summary: commit times, and from the store what the receiver knows (losses it counted, duplicates,
late arrivals) next to the ground truth (the ring offsets, and the sample numbers in the payloads).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from types import SimpleNamespace
from typing import Any

import click

from leadwire import messages
from leadwire.bridge import logs
from leadwire.bridge.accounting import Ledger, check_store
from leadwire.bridge.config import parse
from leadwire.bridge.daemon import Bridge
from leadwire.bridge.store_reader import StoreReader
from leadwire.tools.procstat import cpu_seconds

CH = 1  # the event channel of the workload
HEALTH = 8  # the board's health channel (heap free and low-water)


def bridge_doc(args: SimpleNamespace) -> dict[str, Any]:
    """The bridge's config: one board, polled as fast as it answers, commits every 50 ms."""
    return {
        "bridge": {"id": "bench", "metrics": ""},
        "store": {"path": args.store, "commit_interval": 0.05},
        "polling": {
            "batch": 255,
            "max_bytes": args.max_bytes,
            "interval": 0.005,
            "interval_min": 0.0,
            "interval_max": 0.05,
            "timeout": args.timeout,
            "backoff_max": max(args.timeout, 0.05),
            "frames": args.frames,
            "pipeline": bool(args.pipeline),
            **({"rto_min": args.rto_min} if args.rto_min >= 0 else {}),  # (code before rtt.py: no key)
        },
        # the board: start_board(key=None); over UDP, or a serial port (netem_bench)
        "device": [{"id": "board-1", "auth": False,
                    **({"serial": args.serial, "baud": args.baud} if args.serial else {"udp": args.board})}],
    }  # fmt: skip


def time_commits(b: Bridge) -> list[tuple[float, int]]:
    """(time, events committed) at each commit: the instance's flush, wrapped."""
    commits: list[tuple[float, int]] = []
    orig = b.flush

    async def flush(periodic: bool = False) -> int:
        r = await orig(periodic)
        if r:
            commits.append((time.time(), b.events_committed))
        return r

    b.flush = flush  # type: ignore[method-assign]
    return commits


def time_round_trips(b: Bridge) -> list[tuple[bool, float]]:
    """(is a request, when) of each datagram the bridge sends to / receives from the board."""
    r = next(iter(b.runners.values()))
    marks: list[tuple[bool, float]] = []
    send, on_datagram = r.link.send, r.on_datagram

    def timed_send(data: bytes) -> None:
        marks.append((True, time.perf_counter()))
        send(data)

    def timed_rx(data: bytes) -> None:
        marks.append((False, time.perf_counter()))
        on_datagram(data)

    r.link.send = timed_send
    r.on_datagram = timed_rx  # type: ignore[method-assign]
    return marks


def split_marks(marks: list[tuple[bool, float]]) -> tuple[list[float], list[float]]:
    """Round trips seen from the bridge: request sent -> answer received (the board's response time
    plus loopback), and answer -> next request (the bridge's own time, incl. pacing)."""
    rtt: list[float] = []
    gap: list[float] = []
    last_send = last_rx = None
    for is_send, t in marks:
        if is_send:
            if last_rx is not None:
                gap.append(t - last_rx)
            last_send, last_rx = t, None
        elif last_rx is None and last_send is not None:
            rtt.append(t - last_send)
            last_rx = t
    return rtt, gap


async def run(args: SimpleNamespace) -> dict[str, Any]:
    b = Bridge(parse(bridge_doc(args)), logs.setup("error"))
    commits = time_commits(b)
    await b.start()
    marks = time_round_trips(b)
    writer = getattr(getattr(b.store, "proc", None), "pid", None)  # the store writer process, if any
    wcpu0 = cpu_seconds(writer)
    committed0 = b.events_committed
    cpu0 = time.process_time()
    t0 = time.monotonic()
    t_end = time.monotonic() + args.seconds
    while time.monotonic() < t_end and b.events_committed < args.events:
        await asyncio.sleep(0.01)
    cpu = time.process_time() - cpu0
    wall = time.monotonic() - t0
    wcpu = cpu_seconds(writer)
    committed = b.events_committed - committed0
    await b.stop()
    c = next(iter(b.clients.values()))
    rtt, gap = split_marks(marks)
    return {
        "commits": commits,
        "counters": dict(
            c.dc,
            pipelined=c.pc.pipelined,
            mispredicted=c.pc.mispredicted,
            held_taken=getattr(c.pc, "held_taken", 0),
        ),
        "rto": c.rtt.stats() if hasattr(c, "rtt") else None,  # retransmission timing (rtt.py)
        "failed": repr(b.failed) if b.failed else None,
        "bridge_cpu_s": cpu,
        "writer_cpu_s": wcpu - wcpu0 if wcpu is not None and wcpu0 is not None else None,
        "committed_in_window": committed,
        "wall_s": wall,
        "rtt_ms": stats(rtt),
        "bridge_gap_ms": stats(gap),
    }


def stats(v: list[float]) -> dict[str, float]:
    if not v:
        return {}
    v = sorted(v)
    return {
        "n": len(v),
        "mean": 1e3 * sum(v) / len(v),
        "p50": 1e3 * v[len(v) // 2],
        "p90": 1e3 * v[int(0.9 * len(v))],
        "p99": 1e3 * v[int(0.99 * len(v))],
        "max": 1e3 * v[-1],
    }


def account(store: str) -> dict[str, Any]:
    """The receiver's knowledge (losses table, duplicate and lead flags) and the ground truth."""
    with StoreReader(store) as db:
        return _account(db)


def _account(db: StoreReader) -> dict[str, Any]:
    epochs = db.boot_epochs()
    out: dict[str, Any] = {"epochs": len(epochs)}
    offs = [o for o, _ in db.events_by_arrival()]
    if not offs:
        return out | {"events": 0}
    first = offs[0]
    # the one accounting check (leadwire.bridge.accounting), the store its own witness: every offset
    # from the first contact's n0 to the newest stored or counted is stored once or in a loss row
    led = Ledger()
    for d in db.devices():
        led.add(check_store(db, d.dev))
    out["events_all_channels"] = len(offs)
    out["offset_span"] = led.generated
    out["counted_lost"] = led.lost
    out["unknown_losses"] = sum(1 for x in db.losses() if x.lost is None and x.cause != "first_contact")
    out["silent_lost"] = led.silent  # offsets neither stored nor counted as lost
    out["accounting_ok"] = led.ok
    out["ledger"] = led.line()
    losses = db.losses()
    # channel 1 only: the sample numbers (u16, wrapping) are an independent check
    rows = [(((o - first) & 0xFFFFFFFF), d) for o, d in db.events_by_arrival(CH)]
    rows.sort()
    samples = [messages.decode_sample(d)[0] for _, d in rows]
    gaps = sum(((b - a) & 0xFFFF) - 1 for a, b in itertools.pairwise(samples))
    out["events"] = len(rows)
    out["ch1_missing_by_samples"] = gaps
    out["duplicates_flagged"] = db.totals()["dups"]
    out["late_flagged"] = db.late_arrivals()
    out["restarts"] = sum(1 for loss in losses if loss.cause == "restart")
    # the board's health records: heap free after a collection (live data), and its low-water
    health = [messages.decode_health(d) for _, d in db.events_by_arrival(HEALTH)]
    if health:
        out["heap_free_live"] = min(h["heap_free"] for h in health)
        out["heap_min_free"] = min(h["heap_min"] for h in health)
    return out


@click.command()
@click.option("--board", default="")
@click.option("--serial", default="", help="poll the board on this serial port instead of --board")
@click.option("--baud", type=int, default=115200)
@click.option("--store", required=True)
@click.option("--events", type=int, default=200_000)
@click.option("--seconds", type=float, default=10.0)
@click.option("--timeout", type=float, default=0.25)
@click.option("--max-bytes", type=int, default=1460)
@click.option("--frames", type=int, default=16)
@click.option("--pipeline", type=int, default=1, help="1: pipelined POLLs (polling.pipeline)")
@click.option("--rto-min", type=float, default=-1.0, help="polling.rto_min (default: the bridge's)")
def main(**kw: Any) -> None:
    args = SimpleNamespace(**kw)
    res = asyncio.run(run(args))
    res["store"] = account(args.store)
    print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
