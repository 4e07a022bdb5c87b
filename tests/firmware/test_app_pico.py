"""The application API on the emulated Pico (official RPI_PICO v1.26.1 on rp2040js): the examples of
docs/firmware.md "Writing your application", read from that page and run as they are. The
emulator's ADC gives a known sequence of values (PicoBoard.adc); each test finds exactly those
readings, in order: in the ring (an application's own task; a timer interrupt through
lwirq.Emitter) and in the bridge's store (config-declared ADC sources)."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from leadwire import messages, wire
from leadwire.bridge import logs
from leadwire.bridge.daemon import Bridge
from leadwire.tools.board import PicoBoard, pico_missing
from leadwire.tools.picohil import RawRepl, configure, flashed_pico
from leadwire.tools.wireclient import Client, SerialLink

from ..bridge.helpers import bridge_config, query, wait_for

pytestmark = [pytest.mark.micropython, pytest.mark.timeout(600)]

DOC = Path(__file__).resolve().parents[2] / "docs" / "firmware.md"
BASE = {"id": "app", "auth": False, "udp": False, "sensors": [], "health": {"ms": 0}}
# 12-bit values the ADC gives, in this order (0: what it reads before they are queued)
VALUES = [100, 2000, 4095, 7, 3500, 1234]


def example(name: str) -> str:
    """The code block after `<!-- example: name -->` in docs/firmware.md."""
    m = re.search(r"<!-- example: %s -->\n```\w+\n(.*?)```" % re.escape(name), DOC.read_text(), re.S)
    assert m, "docs/firmware.md has no example %r" % name
    return m.group(1)


@pytest.fixture(scope="module")
def pico(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PicoBoard]:
    why = pico_missing()
    if why:
        pytest.skip(why)
    board = flashed_pico(tmp_path_factory.mktemp("pico"), BASE)
    try:
        yield board
    finally:
        board.close()


def install(board: PicoBoard, main: str | None, config: dict[str, Any]) -> None:
    """main.py (None: the one `leadwire flash` put there stays) and config.json; reset; ready."""
    if main is not None:
        repl = RawRepl(board.repl or "")
        try:
            repl.enter()
            repl.run("f = open('main.py', 'w')\nf.write(%r)\nf.close()\n" % main)
        finally:
            repl.close()
    configure(board, config)


def readings(data: list[bytes]) -> list[int]:
    return [int.from_bytes(d, "big") for d in data]


def ring_events(c: Client, channel: int) -> list[bytes]:
    """Every event the ring holds on `channel`, oldest first."""
    f = c.poll(0, 1)
    if f.type == wire.RECOVERY:
        n = (messages.decode_recovery(f)[0] - 1) & 0xFFFFFFFF
    elif f.type == wire.EVENTS:
        n = (f.seq - 1) & 0xFFFFFFFF
    else:
        return []
    out: list[tuple[int, bytes]] = []
    while True:
        f = c.poll(n, 255)
        if f.type != wire.EVENTS:
            return [d for ch, d in out if ch == channel]
        _, recs = messages.decode_records(f.payload)
        out += recs
        n = (f.seq + len(recs) - 1) & 0xFFFFFFFF


def board_sleep(board: PicoBoard, seconds: float) -> None:
    end = board.clock()["nanos"] + seconds * 1e9
    while board.clock()["nanos"] < end:
        time.sleep(0.05)


def settled(got: list[int], want: list[int], first: int) -> None:
    """got is `first` (read before the values were queued) some times, want in order, then want's
    last value for good: exactly, nothing else in between."""
    k = 0
    while k < len(got) and got[k] == first:
        k += 1
    assert got[k : k + len(want)] == want, got
    assert set(got[k + len(want) :]) <= {want[-1]}, got


def test_application_task_emits_readings_and_raises_an_alarm(pico: PicoBoard) -> None:
    """The app-task example: its readings of ADC 0 on channel 3, exactly the emulator's values in
    order; one alarm (code 128) with the first value above 3,000, again only after the level fell."""
    install(pico, example("app-task"), BASE)
    pico.adc(0, VALUES)
    board_sleep(pico, 1.5)  # 15 readings at 10 Hz: the six values and the last one repeated
    c = Client(SerialLink(pico.port or ""))
    try:
        settled(readings(ring_events(c, 3)), VALUES, 0)
        alarms = [messages.decode_alarm(d) for d in ring_events(c, 9)]
    finally:
        c.close()
    assert alarms == [(128, 4095), (128, 3500)]


def test_timer_interrupt_emits_through_lwirq(pico: PicoBoard) -> None:
    """The app-irq example: a machine.Timer at 20 Hz reads the temperature sensor (ADC 4) in its
    handler and posts it; the readings on channel 4 are exactly the emulator's values, in order,
    none missed."""
    install(pico, example("app-irq"), BASE)
    pico.adc(4, VALUES)
    board_sleep(pico, 1.0)
    c = Client(SerialLink(pico.port or ""))
    try:
        got = readings(ring_events(c, 4))
    finally:
        c.close()
    settled(got, VALUES, 0)
    assert len(got) >= 15


def test_config_adc_sources_reach_the_bridge_store(pico: PicoBoard, tmp_path: Path) -> None:
    """The config-sources example with the default main.py: ADC 0 at 20 Hz on channel 1 and the
    temperature sensor at 1 Hz on channel 2; the bridge polls UART0 and stores exactly the
    emulator's values, in order (read_u16: the 12-bit value << 4 | >> 8)."""
    install(pico, "import lwapp\n\nlwapp.run()\n", json.loads(example("config-sources")))
    pico.adc(0, VALUES)
    pico.adc(4, [876])
    board_sleep(pico, 1.0)

    async def main() -> None:
        cfg = bridge_config(tmp_path, [{"id": "pico", "serial": pico.port, "auth": False}])
        br = Bridge(cfg, logs.setup("warning"))
        await br.start()
        c = br.clients["pico"]
        await wait_for(lambda: c.dc["events_stored"] >= 30, timeout=120)
        await br.stop()

    asyncio.run(main())
    rows = query(tmp_path / "store.db", "SELECT channel, data FROM events ORDER BY arrival")
    adc0 = [v >> 4 for v in readings([d for ch, d in rows if ch == 1])]
    assert [v & 0xF for v in readings([d for ch, d in rows if ch == 1])] == [v >> 8 for v in adc0]
    settled(adc0, VALUES, 0)
    temp = [v >> 4 for v in readings([d for ch, d in rows if ch == 2])]
    assert temp and set(temp) <= {0, 876} and temp[-1] == 876, temp
