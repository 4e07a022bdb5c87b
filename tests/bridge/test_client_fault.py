"""A bug in one device's poll client (PollStateError) stops neither the bridge nor the other devices,
and the device's accounting stays exact across the reset that follows."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest

from leadwire import client as core
from leadwire.bridge import logs
from leadwire.bridge.accounting import check_store, require
from leadwire.bridge.daemon import Bridge
from leadwire.bridge.metrics import make_registry
from leadwire.bridge.store_reader import StoreReader
from leadwire.tools.simdevice import SimFleet

from .helpers import bridge_config, query, wait_for

pytestmark = pytest.mark.timeout(60)

M32 = 0xFFFFFFFF


@pytest.mark.parametrize("auth", [False, True], ids=["unsigned", "signed"])
def test_a_poll_state_error_resets_that_device_only_and_nothing_is_silent(tmp_path: Path, auth: bool) -> None:
    """Device 2's client is made inconsistent so that its next answer is an event its state does not
        allow (PollStateError). The bridge logs one line, counts it, resets that
        client from its offsets and goes on; the loop sees no unhandled exception. Then every ring
        overruns (100 events into 16 slots): each device's store holds 5 + 16 events and one exact
        overrun loss of 84, stored + counted lost = generated, the same rows for all three devices. Signed
    devices too: the reset's HELLO is a new handshake."""

    async def main() -> tuple[Bridge, SimFleet, list[dict[str, Any]], list[dict[str, Any]]]:
        fleet = await SimFleet(3, rate=0, capacity=16, seed=5, auth=auth).start()
        out = io.StringIO()
        poll = {"adaptive": False, "interval": 0.02, "interval_min": 0.02, "interval_max": 0.02}
        log = logs.setup("warning", out, "json")
        b = Bridge(bridge_config(tmp_path, fleet.describe(), polling=poll), log)
        unhandled: list[dict[str, Any]] = []
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: unhandled.append(ctx))
        await b.start()
        try:
            for c in fleet.cores:
                c.write_events(5)
            await wait_for(lambda: b.events_committed == 15)
            target = b.runners["sim-1"]
            # an inconsistent client: unproven events (leadwire.hold) exist only in CHASE, so the
            # next NO_EVENT answer fires ON_UNPROVEN in NORMAL, which the table does not allow
            assert target.client.pc.state == core.NORMAL
            target.client.pc.unproven = 1
            await wait_for(lambda: target.faults == 1)
            rts = target.client.dc["round_trips"]
            # polled again: the HELLO, then POLLs from its offset n (NORMAL, not a first contact)
            await wait_for(lambda: target.client.dc["round_trips"] >= rts + 3)
            assert target.client.pc.state == core.NORMAL
            for c in fleet.cores:
                c.write_events(100)
            await wait_for(lambda: b.events_committed == 15 + 3 * 16)
        finally:
            await b.stop()
            await fleet.stop()
        lines = [json.loads(x) for x in out.getvalue().splitlines()]
        return b, fleet, lines, unhandled

    b, fleet, lines, unhandled = asyncio.run(main())
    assert unhandled == []
    faults = [x for x in lines if x["event"] == "client_fault"]
    assert len(faults) == 1
    f = faults[0]
    assert (f["level"], f["device"], f["during"], f["state"]) == ("error", "sim-1", "answer", core.NORMAL)
    assert f["error"] == "poll client: %s is not allowed in state %s" % (core.ON_UNPROVEN, core.NORMAL)
    assert [r.faults for r in b.runners.values()] == [0, 1, 0]
    fam = {m.name: m for m in make_registry(b).collect()}["leadwire_client_faults"]
    assert sorted((s.labels["device"], s.value) for s in fam.samples if s.name.endswith("_total")) == [
        ("sim-0", 0),
        ("sim-1", 1),
        ("sim-2", 0),
    ]
    db = tmp_path / "store.db"
    rows = query(db, "SELECT dev, cause, lost, recovered FROM losses ORDER BY dev, seq")
    assert rows == [(d, c, lost, rec) for d in (1, 2, 3)
                    for c, lost, rec in (("first_contact", None, 5), ("overrun", 84, 16))]  # fmt: skip
    with StoreReader(str(db)) as reader:
        for dev, c in enumerate(fleet.cores, start=1):
            stored = query(db, "SELECT COUNT(*) FROM events WHERE dev=?", dev)[0][0]
            assert stored + 84 == c.generated == 105
            led = require(check_store(reader, dev, {c.epoch: (c.start, (c.start + c.generated - 1) & M32)}))
            assert (led.generated, led.stored, led.lost) == (105, 21, 84)
            assert led.before_contact == led.silent == 0
