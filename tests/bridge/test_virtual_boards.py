"""The bridge against the real firmware on MicroPython virtual boards (tools/board.py), UDP and serial."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from leadwire import messages, u32
from leadwire.bridge import logs
from leadwire.bridge.daemon import Bridge

from .helpers import bridge_config, query, toml_config, wait_for

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
    d.update({"key": b.key} if b.key else {"auth": False})
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


def board_auth_rejects(db: Path) -> dict[str, int] | None:
    """The board's own auth counters: the 6-byte record after its last health record (auth on)."""
    recs = []
    for (body,) in query(db, "SELECT data FROM reports WHERE channel = 8 ORDER BY arrival"):
        recs += [d for ch, d in messages.decode_records(body)[1] if len(d) == messages.HEALTH_AUTH_SIZE]
    return messages.decode_health_auth(recs[-1]) if recs else None


@pytest.mark.parametrize("signed", [False, True], ids=["unsigned", "signed"])
@pytest.mark.parametrize("transport", ["udp", "serial"])
def test_bridge_polls_a_virtual_board_and_detects_its_restart(
    tmp_path: Path, transport: str, signed: bool
) -> None:
    with board.start_board(transport, config=BOARD_CONFIG, key="auto" if signed else None) as b:

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
            if signed:  # the bridge refused nothing: no attack, no forged frame from the restart
                assert c.auth is not None
                assert (c.dc["auth_forged"], c.dc["auth_unsigned"]) == (0, 0)

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
    if signed:  # the board's own count (its last health): no replay, nothing unsigned; "forged" only
        # the old session's polls the new boot refused before the handshake (1 or 2: timing)
        rej = board_auth_rejects(db)
        assert rej is not None and rej["auth_replayed"] == rej["auth_unsigned"] == 0
        assert rej["auth_forged"] <= 3


def test_signed_board_and_the_bridge_process_key_never_in_the_output(tmp_path: Path) -> None:
    """End to end: a MicroPython board with a random key (key="auto"), the bridge as a process;
    events stored exactly once, no reject on either side, the key nowhere in the log or status."""
    import subprocess
    import sys
    import time

    root = Path(__file__).resolve().parents[2]
    with board.start_board("udp", config=BOARD_CONFIG, key="auto") as b:
        assert b.key and len(b.key) == 64
        cfg = toml_config(tmp_path, [device_entry(b, "udp")], extra="hello_interval = 1.0")
        db = tmp_path / "store.db"
        log = tmp_path / "bridge.log"
        p = subprocess.Popen(
            [sys.executable, "-m", "leadwire.cli", "bridge", "--config", str(cfg)],
            stdout=subprocess.DEVNULL, stderr=log.open("wb"), cwd=root,
        )  # fmt: skip
        try:
            end = time.monotonic() + 40
            while time.monotonic() < end:
                try:
                    if query(db, "SELECT COUNT(*) FROM events")[0][0] >= 300:
                        break
                except Exception:
                    pass
                time.sleep(0.1)
            time.sleep(1.5)  # past hello_interval: a device with a key gets no periodic HELLO, no reject
            p.terminate()
            assert p.wait(timeout=15) == 0
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        status = subprocess.run(
            [sys.executable, "-m", "leadwire.cli", "status", "--config", str(cfg), "--json"],
            capture_output=True, text=True, timeout=30, cwd=root,
        )  # fmt: skip
        console = b.console()
    assert check_events(db) >= 300
    (row,) = [json.loads(x) for x in status.stdout.splitlines()]
    assert (row["auth_forged"], row["auth_replayed"], row["auth_unsigned"]) == (0, 0, 0)
    assert row["events"] >= 300 and row["reports"] >= 1
    rej = board_auth_rejects(db)
    assert rej == {"auth_forged": 0, "auth_replayed": 0, "auth_unsigned": 0}
    text = log.read_text() + status.stdout + status.stderr + str(console)
    for i in range(0, 64 - 15, 4):
        assert b.key[i : i + 16] not in text


@pytest.mark.parametrize("push", [False, True], ids=["poll", "poll+push"])
def test_pipelined_polls_against_a_fast_board_store_or_count_every_offset(tmp_path: Path, push: bool) -> None:
    """polling.pipeline against the firmware: bursts of 8 frames from a board generating 50,000
    events/s into a 128-event ring. The next POLL goes out from each burst's predicted end; every
    offset the board spanned is stored once or counted lost (losses rows), none silently. With a
    push session as well (SUBSCRIBE requests and ACKs between the POLLs), reports are numbered
    from 1 with no gap."""
    cfg_board: dict[str, Any] = {
        "ring": 128,
        "slot": 64,
        "tick": 0,
        "health": {"ms": 1000},
        "sensors": [{"ch": 1, "hz": 50000, "size": 64}],
        "udp": {"frame": 1472},
    }
    if push:
        cfg_board["health"] = {"ms": 200}
        cfg_board["report"] = {"ms": 100}
    with board.start_board("udp", config=cfg_board) as b:

        async def main() -> tuple[int, int]:
            polling = {
                "timeout": 0.25,
                "batch": 255,
                "max_bytes": 1460,
                "frames": 8,
                "pipeline": True,
                "interval_min": 0.0,
            }
            dev: dict[str, Any] = {"id": "fast", "udp": "%s:%d" % b.address, "auth": False}
            if push:
                dev["subscribe"] = [8]
            cfg = bridge_config(tmp_path, [dev], polling=polling)
            br = Bridge(cfg, logs.setup("warning"))
            await br.start()
            c = br.clients["fast"]
            reports = 5 if push else 0
            await wait_for(lambda: c.dc["events_stored"] >= 30_000 and c.dc["reports_stored"] >= reports, 60)
            await br.stop()
            return c.pc.pipelined, c.pc.mispredicted

        pipelined, mispredicted = asyncio.run(main())
    db = tmp_path / "store.db"
    assert len(query(db, "SELECT DISTINCT boot_epoch FROM events")) == 1
    offs = [r[0] for r in query(db, "SELECT offset FROM events ORDER BY arrival")]
    stored = query(db, "SELECT COUNT(*) FROM arrivals WHERE kind=0 AND duplicate=0")[0][0]
    assert len(offs) == len(set(offs)) == stored  # each offset stored once
    first = offs[0]
    rel = [(o - first) & 0xFFFFFFFF for o in offs]
    assert rel == sorted(rel)  # in offset order
    counted = 0
    span = rel[-1] + 1
    for client_n, lost, cause in query(db, "SELECT client_n, lost, cause FROM losses"):
        if cause == "first_contact":
            continue
        assert cause == "overrun" and lost is not None
        start = (client_n + 1 - first) & 0xFFFFFFFF
        if start >= 0x80000000:
            continue  # an overrun before the first event stored (right after first contact)
        counted += lost
        span = max(span, start + lost)
    assert span == len(offs) + counted  # stored + counted lost == spanned: nothing silent
    assert pipelined > 100, (pipelined, mispredicted)  # POLLs sent before their burst was in
    if push:
        nums = [r[0] for r in query(db, "SELECT number FROM reports ORDER BY number")]
        assert len(query(db, "SELECT DISTINCT session FROM reports")) == 1
        assert len(nums) >= 5 and nums == list(range(1, len(nums) + 1))
