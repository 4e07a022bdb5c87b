"""A lossy link keeps its throughput: the bridge polling a simulated device through netem at 5% loss
each way commits at least half the events per second it commits on a clean link, in the same test.

The device's ring holds 40 ms of its events: a bridge that waited a fixed `polling.timeout` (here
0.2 s, plus its backoff) for every lost datagram lost most of them to overruns (counted); with the
RTO measured on the link (host/bridge/rtt.py) a loss costs a few milliseconds. Both runs also
account for every event exactly: stored + counted lost == generated, nothing stored twice. The
long version with the real firmware, ladders of offered rates and 1% loss: bench/netem_bench.py.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from leadwire.bridge import logs
from leadwire.bridge.accounting import check_store, require
from leadwire.bridge.config import parse
from leadwire.bridge.daemon import Bridge
from leadwire.bridge.store_reader import StoreReader
from leadwire.tools.netem import Impairment, UdpImpairer
from leadwire.tools.simdevice import SimFleet

RATE = 2000  # events/s offered by the device
RING = 80  # 40 ms of events
WINDOW = 2.5  # seconds measured per run


async def run(tmp: Path, name: str, loss: float) -> dict[str, Any]:
    fleet = await SimFleet(1, rate=RATE, capacity=RING, seed=7, channels=1, tick=0.002).start()
    (dev,) = fleet.describe()
    imp = await UdpImpairer(("127.0.0.1", 0), fleet.links[0].address, Impairment(loss=loss, seed=11)).start()
    assert imp.address is not None
    doc = {
        "bridge": {"id": name, "metrics": ""},
        "store": {"path": str(tmp / (name + ".db")), "commit_interval": 0.05, "writer": "thread"},
        # rto_min 5 ms: a loopback link (the default floor, 0.1 s, is for loaded hosts and real links)
        "polling": {"batch": 16, "frames": 4, "interval": 0.005, "interval_min": 0.0,
                    "interval_max": 0.02, "timeout": 0.2, "backoff_max": 0.5, "rto_min": 0.005},
        "device": [{"id": dev["id"], "udp": "%s:%d" % imp.address, "auth": False}],
    }  # fmt: skip
    b = Bridge(parse(doc), logs.setup("error"))
    await b.start()
    try:
        await asyncio.sleep(0.5)  # first contact, steady state
        e0 = b.events_committed
        await asyncio.sleep(WINDOW)
        rate = (b.events_committed - e0) / WINDOW
        fleet.running = False  # no more events: the bridge catches up on a clean link
        imp.up.profile = imp.down.profile = Impairment()
        c = next(iter(b.clients.values()))
        core = fleet.cores[0]
        for _ in range(300):
            if c.n == core.ring.newest() and c.recovery is None:
                break
            await asyncio.sleep(0.01)
        assert c.n == core.ring.newest()
        await b.stop()
    finally:
        await b.stop()
        await imp.stop()
        await fleet.stop()
    # the one accounting check, the device's start and newest offset as truth: every event stored
    # once or counted lost, nothing pending (drained)
    with StoreReader(tmp / (name + ".db")) as r:
        led = require(check_store(r, r.devices()[0].dev, {core.epoch: (core.start, core.ring.newest())}))
    assert led.pending == 0 and led.generated == core.generated
    return {"rate": rate, "lost": led.lost, "stored": led.stored, "rto": c.rtt.stats(),
            "timeouts": c.dc["timeouts"]}  # fmt: skip


@pytest.mark.timeout(60)
def test_five_percent_loss_keeps_at_least_half_the_throughput(tmp_path: Path) -> None:
    async def go() -> tuple[dict[str, Any], dict[str, Any]]:
        return await run(tmp_path, "clean", 0.0), await run(tmp_path, "lossy", 0.05)

    clean, lossy = asyncio.run(go())
    print("clean", clean, "\nlossy", lossy)
    assert clean["rate"] > 0.5 * RATE  # the clean link carries the offered rate (most of it, under load)
    assert lossy["timeouts"] > 10 and lossy["rto"]["samples"] > 100  # the loss was there, and timed
    # the RTO follows the link (a loopback round trip): far below the 0.2 s ceiling
    assert lossy["rto"]["rto_p50"] < 0.05
    assert lossy["rate"] >= 0.5 * clean["rate"]
