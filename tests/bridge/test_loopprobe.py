"""The fleet bench's loop probe (tools/loopprobe.py) names what kept a loop late."""

from __future__ import annotations

import asyncio
import gc
import socket
import sys
import time

import pytest

from leadwire.tools.loopprobe import Arrivals, LoopProbe, quantiles


def busy(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_a_long_callback_and_a_full_collection_are_named() -> None:
    async def main() -> dict[str, object]:
        probe = LoopProbe(period=0.005, stall=0.05)
        probe.start()
        await asyncio.sleep(0.05)
        loop = asyncio.get_running_loop()
        loop.call_soon(busy, 0.12)
        await asyncio.sleep(0.05)
        loop.call_soon(gc.collect)
        await asyncio.sleep(0.05)
        probe.stop()
        return probe.result()

    r = asyncio.run(main())
    names = {n: longest for n, _, _, longest in r["callbacks"]}  # type: ignore[union-attr]
    assert names["busy"] >= 110  # ms
    # the heartbeat was late by at least the callback, and the loop thread ran for that long over it
    # (more lateness than CPU is the machine's other load: the process waiting for a core)
    assert r["late_ms"][3] >= 110  # type: ignore[index]
    assert max(s["cpu"] for s in r["stall_list"]) >= 0.11  # type: ignore[union-attr]
    assert r["gc"]["2"]["count"] >= 1  # type: ignore[index]
    assert any(n == "busy" and ms >= 110 for _, ms, n in r["slow_callbacks"])  # type: ignore[union-attr]


def test_quantiles_are_nearest_rank_with_the_maximum() -> None:
    assert quantiles(list(range(1, 1001)), (0.5, 0.99)) == [501, 991, 1000]
    assert quantiles([]) == [0.0, 0.0, 0.0, 0.0]


@pytest.mark.skipif(sys.platform != "linux", reason="SIOCGSTAMP is Linux's")
def test_arrivals_tell_the_kernels_arrival_from_the_read() -> None:
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        rx.bind(("127.0.0.1", 0))
        arr = Arrivals(rx)
        # Linux turns receive stamping on from a workqueue (net_enable_timestamp defers the static
        # key), so a datagram arriving before that work ran is stamped at the read instead. Wait
        # for the first datagram the kernel stamped on arrival; every one after it is.
        delays = []
        for _ in range(20):
            tx.sendto(b"x", rx.getsockname())
            time.sleep(0.03)  # in the kernel, not read
            rx.recvfrom(16)
            t = arr.stamp()
            assert t is not None
            delays.append(time.time() - t)
            if delays[-1] >= 0.025:
                break
        assert 0.025 <= delays[-1] < 5, delays
    finally:
        rx.close()
        tx.close()
