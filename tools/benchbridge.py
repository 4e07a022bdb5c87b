"""The bridge in this process against one board, for the benches that measure a board through it
(bench/goodput_bench.py, pico_bench.py, pico_w_bench.py): the bridge's config, written in one place,
and a run with a measured window. Benches import these from here, never from each other.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from leadwire import wire
from leadwire.bridge import logs
from leadwire.bridge.config import parse
from leadwire.bridge.daemon import Bridge
from leadwire.tools.procstat import cpu_seconds

FRAMES = 16  # answer frames per POLL (a burst)


def bridge_doc(
    store: Path, link: dict[str, Any], max_bytes: int, timeout: float, key: str | None = None
) -> dict[str, Any]:
    """The bridge's config for one board, written in this one place. Authentication is
    this one line: `"auth": False` (unsigned frames) or `"key": HEX` (signed, the board's key)."""
    device: dict[str, Any] = {"id": "board-1", **link, **({"key": key} if key else {"auth": False})}
    return {
        "bridge": {"id": "goodput", "metrics": ""},
        "store": {"path": str(store), "commit_interval": 0.05},
        "polling": {
            "batch": 255,
            "max_bytes": max_bytes,
            "interval": 0.005,
            "interval_min": 0.0,
            "interval_max": 0.05,
            "timeout": timeout,
            "backoff_max": max(timeout, 0.05),
            "frames": FRAMES,
            "hello_interval": 3600.0,
        },
        "device": [device],
    }


async def run_bridge(
    doc: dict[str, Any], board_pid: int, warmup: float, seconds: float, at_window: Any = None
) -> dict[str, Any]:
    """Run the bridge for warmup + seconds; counts of the measurement window (the last `seconds`).

    at_window(start: bool) is called at the window's start and end (serial: netem's counters).
    bridge_cpu is this process's CPU: the bridge, and over serial also the board's pty relay thread."""
    b = Bridge(parse(doc), logs.setup("error"))
    await b.start()
    r = next(iter(b.runners.values()))
    c = next(iter(b.clients.values()))
    rx = {"frames": 0, "bytes": 0, "events_frames": 0}
    on_datagram = r.on_datagram

    def counted(data: bytes) -> None:  # every frame the bridge receives (UDP datagram, serial frame)
        rx["frames"] += 1
        rx["bytes"] += len(data)
        if data and wire.frame_type(data) == wire.EVENTS:
            rx["events_frames"] += 1
        on_datagram(data)

    r.on_datagram = counted  # type: ignore[method-assign]
    try:
        await asyncio.sleep(warmup)
        if at_window:
            at_window(True)
        snap0 = (dict(rx), dict(c.dc), time.time(), time.process_time(), cpu_seconds(board_pid))
        await asyncio.sleep(seconds)
        snap1 = (dict(rx), dict(c.dc), time.time(), time.process_time(), cpu_seconds(board_pid))
        if at_window:
            at_window(False)
    finally:
        await b.stop()
    d_rx = {k: snap1[0][k] - snap0[0][k] for k in rx}
    d_dc = {k: snap1[1].get(k, 0) - snap0[1].get(k, 0) for k in snap1[1] if isinstance(snap1[1][k], int)}
    wall = snap1[2] - snap0[2]
    b0, b1 = snap0[4], snap1[4]
    return {
        "window": (snap0[2], snap1[2]),
        "rx": d_rx,
        "counters": d_dc,
        "failed": repr(b.failed) if b.failed else None,
        "bridge_cpu": (snap1[3] - snap0[3]) / wall,
        "board_cpu": (b1 - b0) / wall if b0 is not None and b1 is not None else None,
    }
