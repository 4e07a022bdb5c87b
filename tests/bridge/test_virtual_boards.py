"""The bridge against the real firmware on MicroPython virtual boards (tools/board.py), UDP and serial."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from leadwire import u32
from leadwire.bridge import logs
from leadwire.bridge.daemon import Bridge

from .helpers import bridge_config, query, wait_for

pytestmark = [pytest.mark.timeout(120), pytest.mark.micropython]

board = pytest.importorskip("leadwire.tools.board")

BOARD_CONFIG = {
    "ring": 256,
    "sensors": [{"ch": 1, "hz": 100, "size": 16}],
    "health": {"ms": 300},
    "report": {"ms": 100},
}


def device_entry(b: Any, transport: str) -> dict[str, Any]:
    d: dict[str, Any] = {"id": "vb-" + transport, "subscribe": [8]}
    if transport == "udp":
        d["udp"] = "%s:%d" % b.address
    else:
        d["serial"] = b.port
    return d


def check_events(db: Path) -> int:
    """Per boot: offsets stored exactly once, consecutive from the first (no gap, no duplicate)."""
    total = 0
    for (epoch,) in query(db, "SELECT DISTINCT boot_epoch FROM events"):
        offs = [
            r[0] for r in query(db, "SELECT offset FROM events WHERE boot_epoch=? ORDER BY arrival", epoch)
        ]
        assert offs == [u32.add(offs[0], i) for i in range(len(offs))]
        total += len(offs)
    return total


@pytest.mark.parametrize("transport", ["udp", "serial"])
def test_bridge_polls_a_virtual_board_and_detects_its_restart(tmp_path: Path, transport: str) -> None:
    with board.start_board(transport, config=BOARD_CONFIG) as b:

        async def main() -> None:
            cfg = bridge_config(tmp_path, [device_entry(b, transport)], polling={"timeout": 0.3})
            br = Bridge(cfg, logs.setup("warning"))
            await br.start()
            c = br.clients["vb-" + transport]
            await wait_for(lambda: c.dc["events_stored"] >= 100 and c.dc["reports_stored"] >= 3, timeout=30)
            await asyncio.get_running_loop().run_in_executor(None, b.restart)
            await wait_for(lambda: c.dc["restarts"] == 1, timeout=30)
            await wait_for(lambda: c.recovery is None and c.dc["events_stored"] >= 200, timeout=30)
            await br.stop()

        asyncio.run(main())
    db = tmp_path / "store.db"
    stored = check_events(db)
    assert stored == query(db, "SELECT COUNT(*) FROM arrivals WHERE kind=0 AND duplicate=0")[0][0]
    boots = query(db, "SELECT boots, detected_by FROM boots ORDER BY first_seen_us")
    assert len(boots) == 2 and boots[1][0] == boots[0][0] + 1
    causes = [r[0] for r in query(db, "SELECT cause FROM losses ORDER BY seq")]
    assert causes[0] == "first_contact" and "restart" in causes
    # push sessions on the health channel: every report once, numbered from 1 in each session
    for (session,) in query(db, "SELECT DISTINCT session FROM reports"):
        nums = [
            r[0] for r in query(db, "SELECT number FROM reports WHERE session=? ORDER BY number", session)
        ]
        assert nums == list(range(1, len(nums) + 1))
