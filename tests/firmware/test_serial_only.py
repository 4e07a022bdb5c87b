"""A board without networking boots and serves over its UART.

The board is the real firmware/boards/rp2.py on the MicroPython unix port, as a plain Pico runs it:
no `socket` module (a socket.py that raises ImportError shadows the unix port's), no `rp2` module
(so no rp2.country), no `network` module, and a fake `machine` whose UART is the virtual board's
pty (tests/firmware/pico_machine.py). The config keeps the UDP link on, as a config made for a
Pico W would: the boot turns off only that link and serves over the serial one."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from leadwire import framing, messages, wire
from leadwire.tools.board import start_board
from leadwire.tools.firmware_build import build
from leadwire.tools.wireclient import Client, SerialLink
from leadwire.u32 import add

from ..hil.test_hil import first_range
from ..mpy.conftest import mpy_cross

HERE = Path(__file__).resolve().parent
FIRMWARE = HERE.parents[1] / "firmware"
pytestmark = [pytest.mark.micropython, pytest.mark.timeout(60)]

NO_SOCKET = "raise ImportError(\"no module named 'socket'\")\n"
NO_NETWORK = "raise ImportError(\"no module named 'network'\")\n"


# A Pico's GC heap is 246 KB; these boards run boards/rp2.py plus fake machine/socket/network
# modules on the unix port, and at 64 KB their boot sat at the heap's edge (a clean-clone run fell
# back to safe defaults on a MemoryError, an earlier one passed). What they test is the boot's
# logic, not its memory: the agent's own 64 KB checks are elsewhere (tests/firmware, tests/hil).
PICO_HEAP = "128K"


def pico_dir(tmp_path: Path) -> Path:
    """A board directory whose board module is boards/rp2.py, on a Pico without networking."""
    d = tmp_path / "board"
    build("unix", d)
    mpy_cross(FIRMWARE / "boards" / "rp2.py", d / "boards" / "unix.mpy")  # main.py picks "unix"
    mpy_cross(HERE / "pico_machine.py", d / "machine.mpy")  # compiled: a 64K heap compiles little
    (d / "socket.py").write_text(NO_SOCKET)
    (d / "network.py").write_text(NO_NETWORK)
    return d


def _hello_over_serial(port: str) -> tuple[str, str, int]:
    c = Client(SerialLink(port))
    try:
        h = c.hello()
        return h.board_id, h.board, h.boots
    finally:
        c.close()


def test_pico_without_networking_boots_on_its_uart(tmp_path: Path) -> None:
    d = pico_dir(tmp_path)
    with start_board("both", config={}, board_dir=d, build_firmware=False, heap=PICO_HEAP) as b:
        out = b.console()
        assert "boot:" not in out, out  # the first attempt succeeded: no fallback tier
        assert "udp: no wlan ssid in config: UDP off" in out
        assert "leadwire 0.1.0 on rp2, id rp2-1c452e, boot 1," in out and "links serial, auth off" in out
        assert "leadwire: ready" in out
        assert b.port is not None
        assert _hello_over_serial(b.port) == ("rp2-1c452e", "rp2", 1)
        # the UART the board opened: UART0 (GP0/GP1 by default on the Pico)
        assert (d / "uart.log").read_text().split()[0] == "0"


def test_pico_with_an_ssid_but_no_wifi_chip_still_serves_serial(tmp_path: Path) -> None:
    # a Pico W config flashed on a plain Pico: rp2.country and network are missing; only the UDP
    # link is off (said once, with what the port raised), the serial link serves
    d = pico_dir(tmp_path)
    cfg = {"wlan": {"ssid": "lab", "key": "secret"}}
    with start_board("both", config=cfg, board_dir=d, build_firmware=False, heap=PICO_HEAP) as b:
        out = b.console()
        assert "boot:" not in out, out
        lines = [ln for ln in out.splitlines() if ln.startswith("udp: cannot open")]
        assert len(lines) == 1 and "ImportError(\"no module named 'rp2'\"" in lines[0], out
        assert "links serial, auth off" in out and "leadwire: ready" in out
        assert b.port is not None
        assert _hello_over_serial(b.port) == ("rp2-1c452e", "rp2", 1)


def test_partial_uart_writes_still_send_whole_frames(tmp_path: Path) -> None:
    # a slow UART: it takes at most 100 bytes a call and every third call nothing;
    # a burst of 3 EVENTS frames of ~1 KB each arrives whole (no COBS or CRC error), and the bytes
    # the UART took are exactly the frames the host decoded, COBS-encoded with their delimiters
    d = pico_dir(tmp_path)
    (d / "partial").write_text("100")
    cfg = {
        "serial": {"frame": 1024},
        "ring": 48,  # the fake machine and boards/rp2.py take ~5 KB of the 64K heap
        "slot": 128,
        "sensors": [{"ch": 1, "hz": 20, "size": 120}],
        "health": {"ms": 0},
    }
    with start_board("serial", config=cfg, board_dir=d, build_firmware=False, heap=PICO_HEAP) as b:
        out = b.console()
        assert "ring 48x128, links serial" in out and "skipped" not in out, out
        c = Client(SerialLink(b.port))
        try:
            c.hello()
            c.drain(0.3)
            time.sleep(1.5)  # ~30 events in the ring (it wraps after 2.4 s)
            n0, _ = first_range(c)
            taken = len((d / "writes.log").read_text().split())
            c.log.clear()
            frames = burst(c, n0, 3)
            rest = c.drain(0.3)
            counts = [int(x) for x in (d / "writes.log").read_text().split()[taken:]]
        finally:
            c.close()
    assert c.errors == [] and rest == []
    assert [f.index for f in frames] == [0, 1, 2]
    sizes = [len(raw) for _, raw in c.log]
    assert len(sizes) == 3 and min(sizes) > 900, sizes  # each well above rp2's 256-byte TX ring
    seqs = []
    for f in frames:
        _, recs = messages.decode_records(f.payload)
        seqs += [messages.decode_sample(data)[0] for _, data in recs]
    assert seqs == [(seqs[0] + i) & 0xFFFF for i in range(len(seqs))]  # no event lost or repeated
    assert max(counts) == 100 and 0 in counts  # the writes really were cut short
    # the device's COBS encoder (the shared core's, never a block code it need not write)
    buf = bytearray(framing.max_encoded(2100))
    assert sum(counts) == sum(framing.encode_into(raw, len(raw), buf) + 1 for _, raw in c.log)


def burst(c: Client, n0: int, k: int) -> list:
    """One POLL from event n0 on, asking for k frames of up to 2047 bytes each."""
    c.tag = (c.tag + 1) & 0xFF
    c.send(messages.poll_frame(add(n0, -1), 255, wire.MAX_PAYLOAD, c.tag, k))
    out = []
    while True:
        f = c.recv([wire.EVENTS], 0.5 if out else 2.0)
        if f is None:
            return out
        out.append(f)
