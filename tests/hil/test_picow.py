"""The emulated Pico W on its Wi-Fi network (tools/pico: the official RPI_PICO_W image, an emulated
CYW43439 and access point): what only a radio link does. A wrong key, the access point lost for
10 s while the agent runs, a 32-frame burst answer through lwIP's small pbuf pools, and signed
frames over UDP. Skips (naming the image) where the RPI_PICO_W firmware is absent."""

from __future__ import annotations

import contextlib
import itertools
import json
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from leadwire import messages, wire
from leadwire.tools.authclient import AuthClient
from leadwire.tools.board import PICO_W_ROUTER, PicoBoard, pico_missing
from leadwire.tools.picohil import configure
from leadwire.tools.wireclient import Client, SerialLink, UdpLink
from leadwire.u32 import add, distance

from .conftest import BASE_CONFIG, PICO_W_WLAN, merged
from .test_burst import burst
from .test_hil import Open, _health, catch_up, first_range, subscribe

pytestmark = [pytest.mark.micropython, pytest.mark.timeout(240)]


# How far ahead of the wall clock the Pico W's clock may run while a test waits for something
# only the board's time brings (a join retry, lwIP's DHCP timer): the board idles between its
# sensors' samples and jumps to its next timer. (A board without its access point is busy: no
# faster.)
AHEAD = 16
SLOW = [{"ch": 1, "hz": 10, "size": 16}, {"ch": 2, "hz": 5, "size": 12}]  # 15 events/s


@contextlib.contextmanager
def ahead(b: PicoBoard) -> Iterator[None]:
    """The board's clock at most AHEAD x the wall clock inside the block, real time again after."""
    b.set_speed(AHEAD)
    try:
        yield
    finally:
        b.set_speed(1)


def _health_records(recs: list[tuple[int, int, bytes]]) -> list[dict[str, int]]:
    return [messages.decode_health(x) for _, ch, x in recs if ch == 8 and len(x) == messages.HEALTH_SIZE]


def test_wrong_key_is_said_retried_and_the_agent_runs(picow_board: PicoBoard) -> None:
    b = picow_board
    cfg = merged(BASE_CONFIG, merged(PICO_W_WLAN, {"wlan": {"key": "not-the-key", "tries": 2, "wait": 5}}))
    n = b.events()
    with ahead(b):  # two joins 5 s apart
        configure(b, cfg, timeout=120)  # the agent gets ready without a network (UDP waits for one)
    console = b.console()
    lines = [x for x in console.splitlines() if x.startswith("wlan: cannot join")]
    assert lines == [
        "wlan: cannot join leadwire-emu: wrong key (status -3, try 1 of 2)",
        "wlan: cannot join leadwire-emu: wrong key (status -3, try 2 of 2)",
    ]
    assert "wlan: no link yet; retrying in the background" in console
    assert len([e for e in b.wlan_events(n) if e["what"] == "badauth"]) == 2  # the AP refused 2 joins
    assert not [e for e in b.wlan_events(n) if e["what"] in ("join", "dhcp-ack")]
    # the background keeper tries again (and says why), the agent answers on UART0 meanwhile
    with ahead(b):
        assert b.wait_wlan("badauth", 60, b.events()) is not None
    assert b.port is not None
    link = SerialLink(b.port)
    link.flush()
    c = Client(link)
    try:
        assert c.hello().board == "rp2"
    finally:
        c.close()
    assert "wlan: link down (wrong key), re-joining" in b.console()
    assert "Traceback" not in b.console()


def test_access_point_lost_for_10_s(open_dut: Open) -> None:
    # a slow ring (15 events/s at 10 s: 150 < 256 slots) keeps every event of the outage; the
    # health channel is pushed (SUBSCRIBE 8), so the board tries to send while the link is down
    d = open_dut("pico-udp", sensors=SLOW, health={"ms": 500})
    b, c = d.board, d.client
    assert isinstance(b, PicoBoard)
    h0 = c.hello()
    n0, _ = first_range(c)
    n, before = catch_up(c, add(n0, -1))
    subscribe(c, [8])
    d.sleep(1.0)
    start = b.ap(False)
    d.sleep(10.0)
    b.ap(True)
    assert b.wait_wlan("join", 60, start) is not None  # the chip re-joins by itself
    assert b.wait_wlan("dhcp-ack", 60, start) is not None
    deadline = time.monotonic() + 60
    while True:  # the first answer after the rejoin
        try:
            h1 = c.hello()
            break
        except TimeoutError:
            assert time.monotonic() < deadline, "no answer after the access point came back"
    assert (h1.boot_epoch, h1.boots) == (h0.boot_epoch, h0.boots)  # no restart
    subscribe(c, [])
    c.drain(0.5)
    f = c.poll(n)
    assert f.type == wire.EVENTS and f.seq == add(n, 1)  # kept in the ring: nothing lost
    n2, after = catch_up(c, n)
    assert distance(n2, n) == len(after) >= 150
    samples: dict[int, list[int]] = {}
    for _, ch, data in before + after:
        if ch in (1, 2):
            samples.setdefault(ch, []).append(messages.decode_sample(data)[0])
    for ch, s in samples.items():  # every sample of the outage, in order, none twice
        assert s == [(s[0] + i) & 0xFFFF for i in range(len(s))], ch
    health = _health_records(after)
    assert health and health[-1]["dropped"] > 0  # pushes the radio could not send while down
    end = d.now() + 12  # the keeper looks every 5 s (board time) and says what changed, once
    while "wlan: link up" not in b.console() and d.now() < end:
        d.sleep(0.5)
    console = b.console()
    assert console.count("wlan: no link") == console.count("wlan: link up") == 1


def test_dhcp_lease_ends(open_dut: Open) -> None:
    # the access point ends every lease: the board's next look at its lease (lwIP's coarse DHCP
    # timer, every 60 s of the board's time: a 30 s lease is over at the first one) is refused,
    # lwIP starts DHCP over and gets its address back; the agent never restarts (slow sensors: an
    # idle board's clock runs ahead, see AHEAD)
    d = open_dut("pico-udp", sensors=SLOW)
    b, c = d.board, d.client
    assert isinstance(b, PicoBoard)
    h0 = c.hello()
    with ahead(b):
        start = b.lease_end()
        assert b.wait_wlan("dhcp-nak", 120, start) is not None
        ack = b.wait_wlan("dhcp-ack", 60, start)
    assert ack is not None and ack["ip"] == "192.168.4.16"
    deadline = time.monotonic() + 60
    while True:
        try:
            h1 = c.hello()
            break
        except TimeoutError:
            assert time.monotonic() < deadline, "no answer after the new lease"
    assert (h1.boot_epoch, h1.boots) == (h0.boot_epoch, h0.boots)


def test_burst_of_32_frames_over_wifi(open_dut: Open) -> None:
    # 32 answer datagrams back to back through lwIP (pbufs, the driver's one SPI buffer): each
    # either arrives or is counted in the health record's `dropped`; the agent goes on either way
    d = open_dut("pico-udp", sensors=[{"ch": 1, "hz": 200, "size": 16}], health={"ms": 1000})
    c = d.client
    d.sleep(4.5)  # 50 events/s (the Pico's pace): ~225 in the 256 slots, 6 to a frame: 32 frames
    n0, _ = first_range(c)
    frames = sorted(burst(c, add(n0, -1), 6, 32, 2 * d.slow, 0.5 * d.slow), key=lambda f: f.index)
    idx = [f.index for f in frames]
    assert idx == sorted(set(idx)) and idx[0] == 0 and frames[0].seq == n0
    assert len(frames) >= 24  # (the emulated link loses none: 32)
    for f, g in itertools.pairwise(frames):  # each frame goes on from the one before it
        assert f.type == g.type == wire.EVENTS
        if g.index == f.index + 1:
            assert g.seq == add(f.seq, len(messages.decode_records(f.payload)[1]))
    d.sleep(1.5)  # a health record written after the burst
    assert _health(c, 4 * d.slow)["dropped"] == 32 - len(frames)  # a frame lwIP refused is counted
    assert c.hello().capacity == 256  # still answering


def test_signed_frames_over_wifi(picow_board: PicoBoard) -> None:
    b = picow_board
    key = secrets.token_hex(16)
    udp = UdpLink(("127.0.0.1", 0))
    host = "%s:%d" % (PICO_W_ROUTER, udp.sock.getsockname()[1])
    # (a slow ring: records() reads from the oldest event, which must still be there when asked)
    signed = {"udp": {"host": host}, "key": key, "auth": True, "sensors": [{"ch": 1, "hz": 20, "size": 16}]}
    configure(b, merged(BASE_CONFIG, merged(PICO_W_WLAN, signed)), timeout=120)
    assert "auth on" in b.console()
    assert b.address is not None
    udp.address = b.address
    c = AuthClient(udp, key)
    try:
        h = c.handshake(timeout=10)
        assert (h.session, h.board, h.boots) == (1, "rp2", 1)
        time.sleep(2.0)
        f = c.poll(0, 1)
        assert f.type in (wire.EVENTS, wire.NO_EVENT, wire.RECOVERY)
        assert c.raw[-1][1] & 0x20  # F_AUTH on the wire
        recs: list[tuple[int, bytes]] = []
        end = time.monotonic() + 30
        while len(recs) < 10 and time.monotonic() < end:  # (an empty ring answers NO_EVENT: wait)
            recs = c.records(timeout=10)
            time.sleep(0.5)
        assert len(recs) >= 10 and not c.rejected
        # a frame signed with another key gets no answer
        other = AuthClient(UdpLink(b.address), secrets.token_hex(16))
        try:
            other.send(other.hello_request())
            assert other.recv_bytes(3.0) is None
        finally:
            other.close()
    finally:
        c.close()


def test_launcher_line_and_missing_image(tmp_path: Path) -> None:
    # without the image: one line naming it, exit 2 (runs where the image is absent too)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "leadwire.cli",
            "board",
            "--kind",
            "pico-w",
            "--firmware",
            str(tmp_path / "no.uf2"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines()[-1] == (
        "leadwire: error: no MicroPython firmware at %s: download the RPI_PICO_W UF2 (v1.26.1) from "
        "micropython.org/download/RPI_PICO_W and give --firmware or $LEADWIRE_PICO_W_UF2"
        % (tmp_path / "no.uf2")
    )
    why = pico_missing(wifi=True)
    if why:
        pytest.skip(why)
    # with it: the JSON line carries the UDP address to poll and the network of the board config
    cfg = tmp_path / "board.json"
    cfg.write_text(json.dumps({"wlan": {"ssid": "my-net", "key": "my-key-123"}, "udp": {"port": 4211}}))
    p = subprocess.Popen(
        [sys.executable, "-m", "leadwire.cli", "board", "--kind", "pico-w", "--config", str(cfg)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert p.stdout is not None
        info = json.loads(p.stdout.readline())
        assert (info["kind"], info["transport"], info["wlan"]) == (
            "pico-w",
            "udp",
            {"ssid": "my-net", "key": "my-key-123"},
        )
        host, port = info["address"].rsplit(":", 1)
        assert host == "127.0.0.1" and 0 < int(port) < 65536
    finally:
        p.send_signal(signal.SIGTERM)
        assert p.wait(30) == 0
