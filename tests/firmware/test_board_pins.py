"""Default UART pins per UART, on CPython with a fake `machine` that records
what boards/rp2.py and boards/esp32.py ask for: a Pico W's UART1 is not on GP0/GP1 (UART0's
only pins), an ESP32's default UART2 is not on GPIO16/17 (the PSRAM's on WROVER modules)."""

from __future__ import annotations

import gc
import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

import pytest

BOARDS = Path(__file__).resolve().parents[2] / "firmware" / "boards"


def board(name: str, mp: pytest.MonkeyPatch) -> tuple[types.ModuleType, list[tuple[Any, dict[str, Any]]]]:
    made: list[tuple[Any, dict[str, Any]]] = []
    m = types.ModuleType("machine")
    m.UART = lambda n, **kw: made.append((n, kw))  # type: ignore[attr-defined]
    m.Pin = lambda n, *a: ("Pin", n)  # type: ignore[attr-defined]
    mp.setitem(sys.modules, "machine", m)
    mp.setattr(gc, "mem_free", lambda: 0, raising=False)  # MicroPython's (boards/rp2.py imports it)
    spec = importlib.util.spec_from_file_location("lw_board_" + name, BOARDS / (name + ".py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod, made


def pins(made: list[tuple[Any, dict[str, Any]]]) -> list[tuple[Any, Any, Any]]:
    return [(n, kw["tx"], kw["rx"]) for n, kw in made]


def test_rp2_pins_per_uart(monkeypatch: pytest.MonkeyPatch) -> None:
    b, made = board("rp2", monkeypatch)
    b.serial({}, bytearray(8))
    b.serial({"uart": 1}, bytearray(8))
    b.serial({"uart": 1, "tx": 8, "rx": 9}, bytearray(8))
    assert pins(made) == [
        (0, ("Pin", 0), ("Pin", 1)),
        (1, ("Pin", 4), ("Pin", 5)),
        (1, ("Pin", 8), ("Pin", 9)),
    ]
    assert {(kw["txbuf"], kw["rxbuf"], kw["timeout"]) for _, kw in made} == {(1024, 256, 0)}


def test_esp32_pins_per_uart(monkeypatch: pytest.MonkeyPatch) -> None:
    b, made = board("esp32", monkeypatch)
    b.serial({}, bytearray(8))
    b.serial({"uart": 1}, bytearray(8))
    b.serial({"uart": 0}, bytearray(8))
    b.serial({"uart": 2, "tx": 17, "rx": 16}, bytearray(8))  # a WROOM user who wants the old pair
    assert pins(made) == [(2, 26, 25), (1, 33, 32), (0, 1, 3), (2, 17, 16)]


def test_no_ssid_no_network_module_touched(monkeypatch: pytest.MonkeyPatch) -> None:
    # a serial-only board: network() returns None before importing rp2, network or wlan
    for name in ("rp2", "esp32"):
        b, _ = board(name, monkeypatch)
        monkeypatch.delitem(sys.modules, "wlan", raising=False)
        assert b.network({}) is None and b.network({"ssid": ""}) is None
        assert "wlan" not in sys.modules


@pytest.mark.parametrize("largest,expected", [(100_000, 150_000 - 40960), (30_000, 150_000 - 30_000)])
def test_esp32_ring_check_leaves_wifi_its_idf_ram(
    monkeypatch: pytest.MonkeyPatch, largest: int, expected: int
) -> None:
    # gc.mem_free() 150,000 counts the largest free IDF block; 40 KB of it (or all, if smaller)
    # is left to Wi-Fi and lwIP
    b, _ = board("esp32", monkeypatch)
    e = types.ModuleType("esp32")
    e.HEAP_DATA = 4  # type: ignore[attr-defined]
    e.idf_heap_info = lambda caps: [(200_000, 60_000, 20_000, 0), (120_000, largest, largest, 0)]  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "esp32", e)
    monkeypatch.setattr(b.gc, "mem_free", lambda: 150_000)
    assert b.mem_free() == expected
