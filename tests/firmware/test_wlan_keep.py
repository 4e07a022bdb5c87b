"""wlan.keep on CPython with fakes of `network` and `asyncio`: it re-joins
only when the station is neither connected nor connecting, backs off while it fails, survives
ESP32's "Wifi Internal Error", and counts any other failure in the agent's health list."""

from __future__ import annotations

import importlib.util
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

WLAN = Path(__file__).resolve().parents[2] / "firmware" / "wlan.py"
STAT_IDLE, STAT_CONNECTING = 1000, 1001  # ESP32's values
RESTARTS = 11  # lwagent's and wlan's _RESTARTS: the index in the health list (test_records)


class Station:
    """A WLAN station whose state at each check comes from a script: (connected, status, error
    connect() raises or None)."""

    def __init__(self, script: list[tuple[bool, int, Exception | None]]) -> None:
        self.script = script
        self.i = -1
        self.joins: list[tuple[str, str]] = []

    def isconnected(self) -> bool:
        self.i += 1  # each check starts here
        return self.script[self.i][0]

    def status(self) -> int:
        return self.script[self.i][1]

    def connect(self, ssid: str, key: str) -> None:
        self.joins.append((ssid, key))
        err = self.script[self.i][2]
        if err is not None:
            raise err


class _Sleep:
    def __await__(self) -> Iterator[None]:
        yield None  # one step of the driver below


@pytest.fixture
def mp(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    return monkeypatch


@pytest.fixture
def wlan(mp: pytest.MonkeyPatch) -> types.ModuleType:
    return load_wlan(mp, STAT_CONNECTING)


def load_wlan(mp: pytest.MonkeyPatch, connecting: int) -> types.ModuleType:
    net = types.ModuleType("network")
    net.STAT_CONNECTING = connecting  # type: ignore[attr-defined]
    mp.setitem(sys.modules, "network", net)
    mpy = types.ModuleType("micropython")  # wlan.py's const(): the identity on CPython
    mpy.const = lambda x: x  # type: ignore[attr-defined]
    mp.setitem(sys.modules, "micropython", mpy)
    spec = importlib.util.spec_from_file_location("lw_wlan_under_test", WLAN)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_checks(wlan: types.ModuleType, st: Station, h: list[int], mp: pytest.MonkeyPatch) -> list[int]:
    """Drive keep() through every scripted check; returns the sleeps it asked for, in s."""
    sleeps: list[int] = []

    def sleep(s: int) -> _Sleep:
        sleeps.append(s)
        return _Sleep()

    fake = types.ModuleType("asyncio")
    fake.sleep = sleep  # type: ignore[attr-defined]
    mp.setitem(sys.modules, "asyncio", fake)
    co = wlan.keep(st, {"ssid": "lab", "key": "pw"}, h)
    for _ in range(len(st.script) + 1):  # the sleep before each check, then the one after the last
        co.send(None)
    co.close()
    return sleeps


def test_keep_rejoins_only_when_down_and_backs_off(wlan: types.ModuleType, mp: pytest.MonkeyPatch) -> None:
    st = Station(
        [
            (True, 1010, None),  # up: nothing
            (False, STAT_IDLE, None),  # down: join (next check in 10 s)
            (False, STAT_CONNECTING, None),  # an attempt under way: no connect()
            (False, STAT_IDLE, OSError("Wifi Internal Error")),  # join refused: said, retried
            (False, STAT_IDLE, None),  # join again (40 s)
            (True, 1010, None),  # up again: back to 5 s
            (True, 1010, None),
        ]
    )
    h = [0] * 12
    sleeps = run_checks(wlan, st, h, mp)
    assert st.joins == [("lab", "pw")] * 3  # checks 2, 4 and 5: never while connected or connecting
    assert sleeps == [5, 5, 10, 10, 20, 40, 5, 5]
    assert h[RESTARTS] == 0  # the refusal is Wi-Fi's, not a failure of the task


def test_keep_counts_other_failures_and_goes_on(wlan: types.ModuleType, mp: pytest.MonkeyPatch) -> None:
    st = Station([(False, STAT_IDLE, MemoryError()), (False, STAT_IDLE, None), (True, 1010, None)])
    h = [0] * 12
    sleeps = run_checks(wlan, st, h, mp)
    assert h[RESTARTS] == 1 and len(st.joins) == 2  # counted once, and the next check joins again
    assert sleeps == [5, 10, 20, 5]


def test_keep_waits_for_dhcp_on_a_pico_w(mp: pytest.MonkeyPatch) -> None:
    # CYW43: STAT_CONNECTING is 1 (joining); 2 is joined, waiting for an address: both under way.
    # On ESP32 a disconnected station's status() is the reason code (2: auth expired): join again.
    pico = load_wlan(mp, 1)
    st = Station([(False, 1, None), (False, 2, None), (False, 0, None), (True, 3, None)])
    assert run_checks(pico, st, [0] * 12, mp) == [5, 5, 5, 10, 5]
    assert len(st.joins) == 1  # only when the link was down (0)
    esp = load_wlan(mp, STAT_CONNECTING)
    st = Station([(False, 2, None), (True, 1010, None)])
    run_checks(esp, st, [0] * 12, mp)
    assert len(st.joins) == 1
