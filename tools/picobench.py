"""What the emulated-Pico benches share (bench/pico_bench.py, bench/pico_w_bench.py): the board's
clock, the serial goodput run (the bridge polling UART0, figures on the board's clock) and the heap
of a keyed board under load. Benches import these from here, never from each other.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from leadwire import messages, wire
from leadwire.tools.authclient import AuthClient
from leadwire.tools.benchbridge import bridge_doc, run_bridge
from leadwire.tools.board import PicoBoard
from leadwire.tools.picohil import configure
from leadwire.tools.wireclient import SerialLink, UdpLink

HZ = 125_000_000  # the RPI_PICO build's clk_sys
FRAME = 2059  # serial frame size for the goodput runs: the link's largest (wire.MAX_FRAME)
GP_EVENT = 64  # goodput: 64-byte events, as bench/goodput_bench.py (16 B caps it at 16/19 of the line)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def goodput_config(hz: int, **links: Any) -> dict[str, Any]:
    """The board config of a goodput run: unsigned, a 512-slot ring of GP_EVENT-byte events from one
    sensor at `hz`, no health or report traffic; `links`: its "serial", "udp" (and "wlan") settings."""
    return {
        "id": "bench",
        "auth": False,
        "ring": 512,
        "slot": GP_EVENT,
        "health": {"ms": 0},
        "report": {"bytes": 64},
        **links,
        "sensors": [{"ch": 1, "hz": hz, "size": GP_EVENT}],
    }


def goodput(
    board: PicoBoard,
    tmp: Path,
    baud: int,
    warmup: float,
    seconds: float,
    offer: float = 2.0,
    frame: int = 1024,
    dma: bool | None = None,
    frames: int = wire.MAX_INDEX + 1,
) -> dict[str, Any]:
    """pico_bench's section 2: the bridge polling UART0 at `baud`; figures on the board's clock. The sensor
    offers `offer` times what the line carries (at most what the sensor task can do). `dma`: the
    serial link's "dma" setting (None: the board's default; rp2: on). `frames`: the bridge's
    polling.frames, the frames a burst POLL asks for (1..32)."""
    line = baud / 10
    hz = min(int(offer * line / (GP_EVENT + 3)), 3000)
    serial = {"frame": frame, "baud": baud, **({} if dma is None else {"dma": dma})}
    configure(board, goodput_config(hz, udp=False, serial=serial))
    db = tmp / ("goodput-%d-%s.db" % (baud, dma))
    burst_s = 512 * (GP_EVENT + 3) * 10 / baud
    # the bridge's timeouts are wall time: the emulator runs at ~0.3x when busy
    # max_bytes: the frame less its 12-byte header, with room to spare: 1000 of 1024
    doc = bridge_doc(db, {"serial": board.port, "baud": baud}, frame - 24, round(4 * (2 * burst_s + 0.5), 2))
    doc["polling"]["pipeline"] = True  # the next POLL goes out before the burst ends: hides latency
    # bursts of 32 frames by default (wire.MAX_INDEX + 1, the most a POLL asks): one carries the
    # whole ring (512 x 67 B in ~17 frames of 2 KB), so frame 0's backlog fits the frames still due.
    # A shorter burst (16) cannot hold an overloaded ring's backlog: max_frames cuts it, and the
    # bridge predicts its end from frame 0's record count (leadwire.client). Either way the next
    # POLL goes out after frame 0 and the line does not idle a host round trip every burst
    doc["polling"]["frames"] = frames
    r = {"baud": baud, "frame": frame, "frames": frames, "dma": dma, "offer": offer, "hz": hz}
    r.update(wall_s=seconds, line=line)
    r.update(bridge_run(board, doc, warmup, seconds))
    r["goodput"] = r["stored"] * GP_EVENT / r["board_s"]
    r["ratio"] = r["goodput"] / line
    dm = "" if dma is None else " dma %s" % dma
    keys = ("stored", "ratio", "busy")
    log(
        "pico_bench: %d baud%s, %d-frame bursts: %s" % (baud, dm, frames, json.dumps({k: r[k] for k in keys}))
    )
    return r


def bridge_run(board: PicoBoard, doc: dict[str, Any], warmup: float, seconds: float) -> dict[str, Any]:
    """The bridge `doc` polling `board` for `seconds` after `warmup`; what it stored and lost, and
    the board's time and CPU over the measured window (the board's clock, not the host's)."""
    clocks: list[dict[str, Any]] = []
    res = asyncio.run(run_bridge(doc, board.pid, warmup, seconds, lambda start: clocks.append(board.clock())))
    c0, c1 = clocks
    board_s = (c1["nanos"] - c0["nanos"]) / 1e9
    stored = res["counters"].get("events_stored", 0)
    cycles = c1["cycles"] - c0["cycles"]
    return {
        "board_s": board_s,
        "stored": stored,
        "lost": res["counters"].get("overrun_lost", 0),
        "busy": cycles / (board_s * HZ),
        "cycles_per_event": cycles / stored if stored else None,
        "failed": res["failed"],
    }


def heap_auth(board: PicoBoard, seconds: float, net: dict[str, Any] | None = None) -> dict[str, Any]:
    """pico_bench's section 3: a keyed board under load, polled by a signing client over UART0 (`net`: a Pico
    W's "wlan" and "udp" settings: over Wi-Fi UDP instead, bench/pico_w_bench.py)."""
    key = os.urandom(32).hex()
    cfg: dict[str, Any] = {
        "id": "bench",
        "key": key,
        "udp": False,
        "health": {"ch": 8, "ms": 500},
        "serial": {"frame": 256},
        "report": {"bytes": 1024},
        "sensors": [{"ch": 1, "hz": 200, "size": 16}, {"ch": 2, "hz": 50, "size": 12}],
    }
    if net:
        cfg.update(net, serial=False)
    configure(board, cfg, timeout=120)
    ready = [ln for ln in board.console().splitlines() if "leadwire: ready" in ln][-1]
    free_boot = int(ready.rsplit("free", 1)[1])
    c = AuthClient(UdpLink(board.address) if net and board.address else SerialLink(board.port or ""), key)
    health: list[dict[str, int]] = []
    received = 0
    try:
        c.handshake(12.0)
        f = c.poll(0)
        n = messages.decode_recovery(f)[0] - 1 if f.type == wire.RECOVERY else 0
        t0 = board.clock()["nanos"]
        while board.clock()["nanos"] - t0 < seconds * 1e9:
            f = c.poll(n, 255, 240)
            if f.type == wire.EVENTS:
                _, recs = messages.decode_records(f.payload)
                n = (f.seq + len(recs) - 1) & 0xFFFFFFFF
                received += len(recs)
                health += [
                    messages.decode_health(d) for ch, d in recs if ch == 8 and len(d) == messages.HEALTH_SIZE
                ]
            elif f.type == wire.RECOVERY:
                n = messages.decode_recovery(f)[0]
    finally:
        c.close()
    r = {
        "free_after_boot": free_boot,
        "received": received,
        "health": len(health),
        "heap_free_min": min(h["heap_free"] for h in health) if health else None,
        "low_water": min(h["heap_min"] for h in health) if health else None,
    }
    log("pico_bench: heap with auth: %s" % json.dumps(r))
    return r
