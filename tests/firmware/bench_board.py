"""Measure a virtual board: heap at 64K, and events/s under batched polls over UDP and serial.

    .venv/bin/python -m tests.firmware.bench_board [--seconds 5]

For each transport and generation rate, a board runs one 16-byte sensor channel at that rate; the
host polls in batches of up to 255 events as fast as answers come back. `delivered` is events
received per second, `lost` events the ring overwrote before they were polled (exact, from the
RECOVERY answers). A rate is sustained when nothing is lost.
"""

from __future__ import annotations

import argparse
import json
import time

from leadwire import messages, wire
from leadwire.tools.board import start_board
from leadwire.u32 import add, distance

from ..hil.client import Client, SerialLink, UdpLink


def run(transport: str, rate: int, seconds: float) -> dict[str, float]:
    cfg = {
        "sensors": [{"ch": 1, "hz": rate, "size": 16}],
        "health": {"ch": 8, "ms": 1000},
        "tick": 1,
    }
    with start_board(transport, config=cfg) as b:
        link = UdpLink(b.address) if transport == "udp" else SerialLink(str(b.port))  # type: ignore[arg-type]
        c = Client(link)
        time.sleep(0.3)
        f = c.poll(0)
        n = add(messages.decode_recovery(f)[0], -1) if f.type == wire.RECOVERY else f.seq
        got = lost = polls = 0
        health: dict[str, int] = {}
        warm = time.monotonic() + 1.0  # first second: catch up with the full ring, not counted
        t0 = warm
        while time.monotonic() - warm < seconds:
            f = c.poll(n, 255, 2047)
            counting = time.monotonic() >= warm
            polls += counting
            if f.type == wire.EVENTS:
                _, recs = messages.decode_records(f.payload)
                got += len(recs) * counting
                n = add(f.seq, len(recs) - 1)
                for ch, data in recs:
                    if ch == 8:
                        health = messages.decode_health(data)
            elif f.type == wire.RECOVERY:
                n0, _ = messages.decode_recovery(f)
                # the ring is full and moving: restart a quarter of it past n0 (the core client's
                # chase guard), counting the skipped events as lost
                lost += (distance(n0, add(n, 1)) + 64) * counting
                n = add(n0, 63)
        dt = time.monotonic() - t0  # the measured window (after the warm-up)
        c.close()
        return {
            "transport": transport,
            "rate": rate,
            "delivered_per_s": round(got / dt),
            "lost_per_s": round(lost / dt),
            "polls_per_s": round(polls / dt),
            "events_per_poll": round(got / max(polls, 1), 1),
            "heap_free": health.get("heap_free", 0),
            "heap_min": health.get("heap_min", 0),
        }


def ready_heap() -> str:
    with start_board("both") as b:
        return next(ln for ln in b.console().splitlines() if "ready" in ln)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rates", default="1000,2000,4000,8000,16000")
    a = ap.parse_args()
    print("both transports, defaults:", ready_heap())
    for transport in ("udp", "serial"):
        for rate in (int(r) for r in a.rates.split(",")):
            print(json.dumps(run(transport, rate, a.seconds)), flush=True)


if __name__ == "__main__":
    main()
