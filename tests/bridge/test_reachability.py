"""The bridge says when a board cannot be reached, and why: one device_unreachable line per silent
episode naming the causes it can tell apart, device_reachable when it answers again, send errors
once per cause, the device_up / last_seen / info metrics and `leadwire status`'s last contact."""

from __future__ import annotations

import asyncio
import errno
import io
import json
import os
import socket
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from leadwire.bridge import logs
from leadwire.bridge.daemon import Bridge
from leadwire.cli import main as leadwire
from leadwire.tools.simdevice import SimCore, SimFleet

from .helpers import bridge_config, wait_for

pytestmark = pytest.mark.timeout(60)


class Log:
    """The bridge's JSON log lines, kept in memory."""

    def __init__(self) -> None:
        self.buf = io.StringIO()
        self.log = logs.setup("info", stream=self.buf, fmt="json")

    def events(self, name: str) -> list[dict[str, Any]]:
        out = [json.loads(x) for x in self.buf.getvalue().splitlines()]
        return [e for e in out if e["event"] == name]


def closed_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def unreachable(tmp: Path, devices: list[dict[str, Any]], **sections: Any) -> dict[str, Any]:
    """Start a bridge on `devices`, wait for its device_unreachable line, stop; the line."""
    lg = Log()
    b = Bridge(bridge_config(tmp, devices, **sections), lg.log)
    await b.start()
    try:
        await wait_for(lambda: bool(lg.events("device_unreachable")), timeout=20)
        await asyncio.sleep(0.3)  # no second line for the same episode
    finally:
        await b.stop()
    (line,) = lg.events("device_unreachable")
    return line


def test_wrong_udp_port_is_port_unreachable(tmp_path: Path) -> None:
    port = closed_udp_port()
    line = asyncio.run(unreachable(tmp_path, [{"id": "d", "udp": "127.0.0.1:%d" % port}]))
    assert (line["level"], line["device"], line["transport"], line["rounds"] >= 5) == (
        "warning",
        "d",
        "udp",
        True,
    )
    assert line["causes"] == ["port_unreachable"]
    assert line["detail"].endswith(
        "ICMP port unreachable: nothing listens on 127.0.0.1:%d (the udp port?)" % port
    )


def test_answers_from_another_port(tmp_path: Path) -> None:
    async def main() -> dict[str, Any]:
        core = SimCore(0)
        rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rx.bind(("127.0.0.1", 0))
        tx.bind(("127.0.0.1", 0))
        rx.setblocking(False)

        def answer() -> None:  # a board (or a NAT) that answers from another port
            data, addr = rx.recvfrom(4096)
            for out in core.handle(data):
                tx.sendto(out, addr)

        asyncio.get_running_loop().add_reader(rx.fileno(), answer)
        tx_port = tx.getsockname()[1]
        try:
            line = await unreachable(tmp_path, [{"id": "d", "udp": "127.0.0.1:%d" % rx.getsockname()[1]}])
        finally:
            asyncio.get_running_loop().remove_reader(rx.fileno())
            rx.close()
            tx.close()
        line["tx_port"] = tx_port
        return line

    line = asyncio.run(main())
    assert line["causes"] == ["other_port"]
    assert "datagrams from the device's host but port %d (" % line["tx_port"] in line["detail"]


def test_wrong_key_without_a_hint_is_no_answer(tmp_path: Path) -> None:
    """A simulated device (no boot-HELLO hint) with another key: silence, and it says so."""

    async def main() -> dict[str, Any]:
        fleet = await SimFleet(1, rate=0, auth=True).start()
        d = fleet.describe()[0]
        d["key"] = os.urandom(32).hex()
        try:
            return await unreachable(tmp_path, [d])
        finally:
            await fleet.stop()

    line = asyncio.run(main())
    assert line["causes"] == ["no_answer"]
    assert line["detail"] == (
        "no answer at all: the board is off, not at this address, or its datagrams are dropped"
    )


class _FailingSocket:
    """The bridge's socket, with sendto refused by the kernel as a socket bound to 127.0.0.1 sending
    to a LAN address is (EINVAL); everything else goes to the real socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def sendto(self, data: bytes, addr: Any) -> int:
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sock, name)


def test_send_errors_logged_once_per_cause_then_unreachable_then_reachable(tmp_path: Path) -> None:
    async def main() -> tuple[Log, list[str], list[str], Bridge]:
        fleet = await SimFleet(1, rate=0, seed=4).start()
        lg = Log()
        b = Bridge(bridge_config(tmp_path, fleet.describe(), bridge={"metrics": "127.0.0.1:0"}), lg.log)
        await b.start()
        r = next(iter(b.runners.values()))
        url = "http://127.0.0.1:%d/metrics" % b.metrics_port

        async def metrics() -> list[str]:
            text = await asyncio.get_running_loop().run_in_executor(
                None, lambda: urllib.request.urlopen(url).read()
            )
            return [ln for ln in text.decode().splitlines() if ln.startswith("leadwire_device_")]

        await wait_for(lambda: r.reach.last_seen_us is not None)
        assert b._udp is not None
        real = b._udp.sock
        b._udp.sock = _FailingSocket(real)  # type: ignore[assignment]
        await wait_for(lambda: not r.reach.up)
        down = await metrics()
        b._udp.sock = real
        await wait_for(lambda: r.reach.up)
        up = await metrics()
        await b.stop()
        await fleet.stop()
        return lg, down, up, b

    lg, down, up, b = asyncio.run(main())
    r = next(iter(b.runners.values()))
    dev = r.client.device_id
    (sent,) = lg.events("send_failed")  # once, though every request failed
    assert r.reach.send_errors >= 5
    assert (sent["level"], sent["device"], sent["errno"], sent["error"]) == (
        "warning",
        dev,
        22,
        "Invalid argument",
    )
    (line,) = lg.events("device_unreachable")
    assert line["causes"] == ["send_failed"]
    assert line["detail"] == "sending to %s fails: EINVAL (Invalid argument)" % r.address
    (back,) = lg.events("device_reachable")
    assert back["device"] == dev and back["down_s"] >= 0
    assert 'leadwire_device_up{device="%s"} 0.0' % dev in down
    assert 'leadwire_device_up{device="%s"} 1.0' % dev in up
    info = 'leadwire_device_info{board="%s",device="%s",firmware="%s",transport="udp"} 1.0' % (
        r.client.board,
        dev,
        r.client.firmware,
    )
    assert info in up and r.client.firmware  # the HELLO's firmware, not empty
    (seen,) = [ln for ln in up if ln.startswith("leadwire_device_last_seen_seconds")]
    assert abs(float(seen.split()[-1]) - time.time()) < 10


def test_status_shows_each_devices_last_contact(tmp_path: Path) -> None:
    async def main() -> tuple[int, int]:
        fleet = await SimFleet(2, rate=0, seed=5).start()
        devs = [*fleet.describe(), {"id": "never", "udp": "127.0.0.1:%d" % closed_udp_port()}]
        b = Bridge(bridge_config(tmp_path, devs), Log().log)
        t0 = time.time_ns() // 1000
        await b.start()
        await wait_for(
            lambda: all(r.reach.last_seen_us for r in b.runners.values() if r.client.device_id != "never")
        )
        await b.stop()
        await fleet.stop()
        return t0, time.time_ns() // 1000

    t0, t1 = asyncio.run(main())
    store = str(tmp_path / "store.db")
    rows = [
        json.loads(x)
        for x in CliRunner().invoke(leadwire, ["status", "--store", store, "--json"]).output.splitlines()
    ]
    got = {r["device"]: r["last_contact_us"] for r in rows}
    assert got["never"] is None
    assert sorted(k for k in got if k != "never") == sorted(
        r["device"] for r in rows if r["device"] != "never"
    )
    assert all(t0 <= v <= t1 for k, v in got.items() if k != "never")
    table = CliRunner().invoke(leadwire, ["status", "--store", store]).output.splitlines()
    assert table[0].endswith("last contact")
    assert [ln.endswith(" ago") or ln.endswith(" never") for ln in table[1:-1]] == [True] * 3
    assert next(ln for ln in table if ln.startswith("never ")).endswith("never")


@pytest.mark.micropython
@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", ["wrong_key", "auth_false"])
def test_the_real_firmware_wrong_key_and_auth_false_are_told_apart(tmp_path: Path, case: str) -> None:
    """The firmware answers a refused frame with its signed boot HELLO while it has no session:
    under another key that is a bad tag; to a bridge with auth = false, a signed frame."""
    board = pytest.importorskip("leadwire.tools.board")
    with board.start_board("udp", config={"ring": 64, "sensors": []}, key="auto") as vb:
        d: dict[str, Any] = {"id": "vb", "udp": "%s:%d" % vb.address}
        d.update({"key": os.urandom(32).hex()} if case == "wrong_key" else {"auth": False})
        line = asyncio.run(unreachable(tmp_path, [d], polling={"timeout": 0.3}))
    if case == "wrong_key":
        assert line["causes"] == ["bad_tag"]
        assert "answers with a bad authentication tag: the board has another key" in line["detail"]
    else:
        assert line["causes"] == ["signed"]
        assert "signed answers: the board has a key, this device has auth = false" in line["detail"]


def test_a_serial_port_that_vanishes_is_one_warning_and_port_closed(tmp_path: Path) -> None:
    async def main() -> tuple[Log, str, int]:
        fleet = await SimFleet(1, rate=0, seed=8, serial=1).start()
        lg = Log()
        b = Bridge(bridge_config(tmp_path, fleet.describe()), lg.log)
        await b.start()
        r = next(iter(b.runners.values()))
        await wait_for(lambda: r.reach.last_seen_us is not None)
        fleet.links[0].close()  # the board unplugged: its pty is gone
        await wait_for(lambda: not r.reach.up)
        polls = r.client.dc["timeouts"]
        await asyncio.sleep(0.5)  # the bridge goes on trying to open it
        more = r.client.dc["timeouts"] - polls
        await b.stop()
        await fleet.stop()
        return lg, r.address, more

    lg, port, more = asyncio.run(main())
    assert more >= 1
    (failed,) = lg.events("serial_open_failed")  # once, not per attempt
    assert (failed["level"], failed["port"]) == ("warning", port)
    (line,) = lg.events("device_unreachable")
    assert line["causes"] == ["port_closed"] and line["transport"] == "serial"
    assert line["detail"].startswith("the serial port cannot be opened: ")
