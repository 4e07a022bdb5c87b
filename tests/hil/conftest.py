"""Hardware-in-the-loop suite: virtual boards by default (UDP and serial), or a real board.

    pytest tests/hil                                         virtual boards, both transports
    pytest tests/hil --board-port /dev/ttyACM0 --board-kind rp2     a real board over serial
    pytest tests/hil --board-port 192.168.4.20:4210 --board-kind esp32   ... over UDP
    ... --board-reset "uhubctl -a cycle -p 2"                a command that power-cycles it

A real board must have been flashed with the suite's config (`leadwire flash --config
tests/hil/board_config.json`): tests that need another config, or a power cycle without
--board-reset, skip on real hardware.
"""

from __future__ import annotations

import copy
import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from leadwire.tools.board import VirtualBoard, start_board

from .client import Client, SerialLink, UdpLink

HERE = Path(__file__).resolve().parent
BASE_CONFIG: dict[str, Any] = json.loads((HERE / "board_config.json").read_text())


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
            metafunc.parametrize("transport", ["udp", "serial"])


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

    def __init__(self, transport: str, config: dict[str, Any], real: dict[str, Any] | None) -> None:
        self.transport = transport
        self.config = config
        self.real = real
        self.board: VirtualBoard | None = None
        self.client: Client
        if real is None:
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
        if self.board is not None:
            self.board.close()


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
        d = Dut(transport, merged(BASE_CONFIG, overrides), real)
        made.append(d)
        return d

    try:
        yield make
    finally:
        for d in made:
            d.close()
