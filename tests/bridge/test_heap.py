"""The collector while a bridge runs (host/bridge/heap.py): frozen and a higher young threshold from
start to stop, the process's own settings back afterwards, nested for bridges that overlap."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

from leadwire.bridge import heap, logs
from leadwire.bridge.daemon import Bridge
from leadwire.tools.simdevice import SimFleet

from .helpers import bridge_config


def test_a_running_bridge_freezes_the_heap_and_stop_gives_the_collector_back(tmp_path: Path) -> None:
    before = gc.get_threshold()
    assert gc.get_freeze_count() == 0

    async def main() -> tuple[int, tuple[int, ...], int]:
        fleet = await SimFleet(2, rate=0, seed=3).start()
        b = Bridge(bridge_config(tmp_path, fleet.describe()), logs.setup("warning"))
        await b.start()
        try:
            frozen, threshold = gc.get_freeze_count(), gc.get_threshold()
            client = b.clients["sim-0"]
            in_permanent = all(id(o) != id(client) for o in gc.get_objects())  # frozen: in no generation
        finally:
            await b.stop()
            await fleet.stop()
        return frozen, threshold, in_permanent

    frozen, threshold, in_permanent = asyncio.run(main())
    assert frozen > 1000 and in_permanent
    assert threshold == (heap.GEN0, *before[1:])
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == before


def test_settle_and_release_nest() -> None:
    before = gc.get_threshold()
    heap.settle()
    heap.settle()
    heap.release()
    assert gc.get_freeze_count() > 0 and gc.get_threshold()[0] == heap.GEN0  # one bridge still runs
    heap.release()
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == before
    heap.release()  # one too many: nothing to give back
    assert gc.get_threshold() == before
