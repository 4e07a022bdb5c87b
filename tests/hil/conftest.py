"""Hardware-in-the-loop suite: virtual boards by default (the unix port over UDP and serial, and the
official rp2 firmware on an emulated Pico over UART0), or a real board.

    pytest tests/hil                                         virtual boards: udp, serial, pico
    pytest tests/hil --board-port /dev/ttyACM0 --board-kind rp2     a real board over serial
    pytest tests/hil --board-port 192.168.4.20:4210 --board-kind esp32   ... over UDP
    ... --board-reset "uhubctl -a cycle -p 2"                a command that power-cycles it

A real board must have been flashed with the suite's config (`leadwire flash --config
tests/hil/board_config.json`): tests that need another config, or a power cycle without
--board-reset, skip on real hardware.

The emulated Pico (tools/picohil.py) needs the RPI_PICO UF2, the RP2040 boot ROM and tools/pico's
npm packages; without them its tests skip naming what to get. `pico-udp` is the same suite over
Wi-Fi: the RPI_PICO_W image on the emulated Pico W (an emulated CYW43439 and access point,
tools/pico), polled over UDP through the access point's NAT; it skips naming the image when absent.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from leadwire.tools.board import (
    PICO_W_KEY,
    PICO_W_ROUTER,
    PICO_W_SSID,
    PicoBoard,
    VirtualBoard,
    pico_missing,
    start_board,
)
from leadwire.tools.picohil import configure, flashed_pico
from leadwire.tools.wireclient import Client, SerialLink, UdpLink

HERE = Path(__file__).resolve().parent
# tests that take 15-50 s each on the emulated Pico: run with LEADWIRE_PICO_FULL=1 (make test keeps
# the Pico tier to a few minutes)
PICO_FULL = "LEADWIRE_PICO_FULL"
PICO_LONG = {
    "test_overrun_recovery_counts_lost_events_exactly",
    "test_heap_within_budget_under_load",
    "test_partial_subscription",
    "test_burst_stops_when_the_ring_runs_dry",
    "test_burst_from_outside_the_ring_is_one_recovery",
}
BASE_CONFIG: dict[str, Any] = json.loads((HERE / "board_config.json").read_text())
# the emulated Pico W's network, and the config it is flashed with (the suite's, joining it)
# (leases of 30 s: the board renews every 15 s of its time, during the tests as a real one would)
PICO_W_NET = {"ssid": PICO_W_SSID, "key": PICO_W_KEY, "port": BASE_CONFIG["udp"]["port"], "lease": 30}
PICO_W_WLAN = {"wlan": {"ssid": PICO_W_SSID, "key": PICO_W_KEY}}


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("leadwire HIL")
    g.addoption("--board-port", default=None, help="real board: serial port, or UDP host:port")
    g.addoption("--board-kind", default=None, choices=["esp32", "rp2", "unix"], help="real board kind")
    g.addoption("--board-reset", default=None, help="shell command that power-cycles the real board")


def _opt(config: pytest.Config, name: str) -> Any:
    try:
        return config.getoption(name)
    except ValueError:  # option not registered (suite run from the repository root)
        return None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "transport" in metafunc.fixturenames:
        port = _opt(metafunc.config, "--board-port")
        if port:
            metafunc.parametrize("transport", ["serial" if port.startswith("/") else "udp"])
        else:
            # the emulated Pico serves on UART0 ("pico"), the emulated Pico W on Wi-Fi ("pico-udp")
            metafunc.parametrize("transport", ["udp", "serial", "pico", "pico-udp"])


def merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merged(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


class Dut:
    """The device under test and a client connected to it."""

    def __init__(
        self,
        transport: str,
        config: dict[str, Any],
        real: dict[str, Any] | None,
        pico: PicoBoard | None = None,
    ) -> None:
        self.transport = transport
        self.config = config
        self.real = real
        self.board: VirtualBoard | PicoBoard | None = None
        self.client: Client
        # what runs the firmware: "unix" (the unix port), "rp2" (emulated Pico), or the real board's
        self.kind = "rp2" if pico is not None else (real or {}).get("kind") or "unix"
        # pace: the sensors' rates relative to the suite's (the Pico: its 125 MHz Cortex-M0+ and a
        # 115,200-baud UART carry a few hundred events/s: a quarter of the rates above 50 Hz, 50 Hz
        # at least); slow: how much
        # longer host-side timeouts are (the emulator runs at ~0.3-0.4x real time when busy)
        self.pace, self.slow = (0.25, 4.0) if pico is not None else (1.0, 1.0)
        if pico is not None:
            config = copy.deepcopy(config)
            for sensor in config.get("sensors") or []:  # (50 Hz and below as they are)
                if sensor["hz"] > 50:
                    sensor["hz"] = max(50, round(sensor["hz"] * self.pace))
            self.config = config
            self.board = pico
            if transport == "pico-udp":  # over Wi-Fi: the boot HELLO to this client, via the router
                udp = UdpLink(("127.0.0.1", 0))
                host = "%s:%d" % (PICO_W_ROUTER, udp.sock.getsockname()[1])
                self.config = config = merged(config, {**PICO_W_WLAN, "udp": {"host": host}})
                configure(pico, config)
                udp.address = pico.address
                self.client = Client(udp)
                return
            assert pico.port is not None
            # the board is shared between tests: what its last session sent unread is in the pty
            # (a test read a stale report's fragment 0 from it, the rest at +0 ms: CI failure)
            link = SerialLink(pico.port)
            link.flush()
            configure(pico, config)
            link.skip_to_hello(10 * self.slow)
            self.client = Client(link)
        elif real is None:
            link: UdpLink | SerialLink
            if transport == "udp":
                link = UdpLink(("127.0.0.1", 0))
                # the board's HELLO after boot goes to this client
                cfg = merged(config, {"udp": {"host": "127.0.0.1:%d" % link.sock.getsockname()[1]}})
                self.board = start_board("udp", config=cfg)
                assert self.board.address is not None
                link.address = self.board.address
            else:
                self.board = start_board("serial", config=config)
                assert self.board.port is not None
                link = SerialLink(self.board.port)
            self.client = Client(link)
        else:
            port = real["port"]
            if port.startswith("/"):
                self.client = Client(SerialLink(port))
            else:
                host, p = port.rsplit(":", 1)
                self.client = Client(UdpLink((host, int(p))))

    @property
    def virtual(self) -> bool:
        return self.board is not None

    def now(self) -> float:
        """Seconds on the board's clock: the emulated Pico's own time (it falls behind the wall
        clock while its CPU is busy), the host's for every other board."""
        if isinstance(self.board, PicoBoard):
            return float(self.board.clock()["nanos"]) / 1e9
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        """Let `seconds` pass on the board's clock."""
        if not isinstance(self.board, PicoBoard):
            time.sleep(seconds)
            return
        end = self.now() + seconds
        while self.now() < end:
            time.sleep(0.02)

    def restart(self) -> None:
        """Power cut and power on (virtual: kill + start on the same directory)."""
        if self.board is not None:
            self.board.restart()
            return
        assert self.real is not None
        if not self.real.get("reset"):
            pytest.skip("power cycling a real board needs --board-reset")
        subprocess.run(self.real["reset"], shell=True, check=True, timeout=60)
        time.sleep(3)

    def close(self) -> None:
        self.client.close()
        if self.board is not None and not isinstance(self.board, PicoBoard):
            self.board.close()  # (the session's emulated Pico stays up for the next test)


# An emulated board's agent keeps its emulator busy (a host core each) while it lives: the boards
# live for this package only, the Pico W's tests come after all the others here, and the plain
# Pico stops when the Pico W starts (never two emulators at once).
_PICOS: list[PicoBoard] = []


def _on_wifi(item: pytest.Item) -> bool:
    cs = getattr(item, "callspec", None)
    return item.path.name == "test_picow.py" or (cs is not None and cs.params.get("transport") == "pico-udp")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    ours = [i for i, it in enumerate(items) if it.path.is_relative_to(HERE)]
    if ours:  # (a stable partition of this package's tests, in place: the rest keeps its order)
        mine = [items[i] for i in ours]
        for i, it in zip(
            ours, [x for x in mine if not _on_wifi(x)] + [x for x in mine if _on_wifi(x)], strict=True
        ):
            items[i] = it


@pytest.fixture(scope="package")
def pico_board(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PicoBoard]:
    """One emulated Pico for the package's tests, flashed once with `leadwire flash --board rp2`."""
    why = pico_missing()
    if why:
        pytest.skip(why)
    board = flashed_pico(tmp_path_factory.mktemp("pico"), BASE_CONFIG)
    _PICOS.append(board)
    try:
        yield board
    finally:
        if board in _PICOS:  # (not stopped already: its fds are closed once)
            _PICOS.remove(board)
            board.close()


@pytest.fixture(scope="package")
def picow_board(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PicoBoard]:
    """One emulated Pico W for the package's tests on its own access point, flashed once with
    `leadwire flash --board rp2` with the suite's config and the network's SSID and key."""
    why = pico_missing(wifi=True)
    if why:
        pytest.skip(why)
    while _PICOS:  # the plain Pico's tests are done (pytest_collection_modifyitems)
        _PICOS.pop().close()
    board = flashed_pico(tmp_path_factory.mktemp("picow"), merged(BASE_CONFIG, PICO_W_WLAN), PICO_W_NET)
    try:
        yield board
    finally:
        board.close()


@pytest.fixture
def open_dut(request: pytest.FixtureRequest) -> Iterator[Callable[..., Dut]]:
    """open_dut(transport, **config overrides) -> a booted board with a client (closed after)."""
    made: list[Dut] = []
    port = _opt(request.config, "--board-port")
    real = None
    if port:
        real = {
            "port": port,
            "kind": _opt(request.config, "--board-kind"),
            "reset": _opt(request.config, "--board-reset"),
        }

    def make(transport: str, **overrides: Any) -> Dut:
        if real is not None and overrides:
            pytest.skip("needs a board flashed with a different config: %r" % (overrides,))
        long = request.node.originalname in PICO_LONG and not os.environ.get(PICO_FULL)
        if transport == "pico" and long:
            pytest.skip("long on the emulated Pico (~0.3x real time): %s=1 runs it" % PICO_FULL)
        pico = None
        if transport.startswith("pico"):
            pico = request.getfixturevalue("pico_board" if transport == "pico" else "picow_board")
        d = Dut(transport, merged(BASE_CONFIG, overrides), real, pico)
        made.append(d)
        return d

    try:
        yield make
    finally:
        for d in made:
            d.close()
