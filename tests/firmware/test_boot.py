"""Boot fallbacks: a bad config gives one clear console line and safe defaults, never a
crash loop; a retry after a failure reads no file again and finds its ports free; a board with no
link never says it is ready, and the launcher reports it as a failure."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from leadwire.tools.board import BoardError, start_board
from leadwire.tools.firmware_build import build
from leadwire.tools.wireclient import Client, SerialLink, UdpLink

from ..mpy.conftest import mpy_cross

HERE = Path(__file__).resolve().parent
pytestmark = [pytest.mark.micropython, pytest.mark.timeout(60)]


def _lines(text: str, part: str) -> list[str]:
    return [ln for ln in text.splitlines() if part in ln]


@pytest.mark.parametrize(
    "cfg,line",
    [
        ({"ring": 320, "slot": 64}, "config: ring 320x64 (21760 B) does not fit: "),
        ({"ring": 80, "slot": 256, "udp": {"frame": 1472}}, "config: ring 80x256 (20800 B) does not fit: "),
    ],
)
def test_ring_that_does_not_fit_boots_on_the_default_ring(tmp_path: Path, cfg: dict, line: str) -> None:
    with start_board("udp", config=cfg, board_dir=tmp_path) as b:
        out = b.console()
        fit = _lines(out, "does not fit")
        assert len(fit) == 1 and fit[0].startswith(line) and fit[0].endswith("; using 256x16"), out
        assert "boot:" not in out and "ring 256x16" in out and "leadwire: ready" in out
        assert b.address is not None
        c = Client(UdpLink(b.address))
        try:
            h = c.hello()
            assert (h.capacity, h.slot_size, h.boots) == (256, 16, 1)
            assert h.frame_size == cfg.get("udp", {}).get("frame", 1024)
        finally:
            c.close()


def test_a_ring_that_fits_is_taken(tmp_path: Path) -> None:
    with start_board("udp", config={"ring": 200, "slot": 64}, board_dir=tmp_path) as b:
        out = b.console()
        assert "does not fit" not in out and "ring 200x64" in out, out


def _faulty(tmp_path: Path) -> Path:
    d = tmp_path / "board"
    build("unix", d)
    (d / "boards" / "unix.mpy").rename(d / "boards" / "unix_base.mpy")  # the test board imports it
    mpy_cross(HERE / "faulty_board.py", d / "boards" / "unix.mpy")
    return d


def _socket_fds(pid: int) -> int:
    fd = Path("/proc/%d/fd" % pid)
    return sum(1 for p in fd.iterdir() if os.readlink(p).startswith("socket:"))


def test_retry_reads_no_file_again_and_finds_its_port_free(tmp_path: Path) -> None:
    d = _faulty(tmp_path)
    cfg = {"id": "fault-1", "ring": 128, "slot": 32, "sensors": [{"ch": 3, "hz": 5, "size": 20}]}
    # both links: UDP is open when the serial port fails; the retry binds the same UDP port again
    with start_board("both", config=cfg, board_dir=d, build_firmware=False) as b:
        out = b.console()
        assert _lines(out, "boot:") == [
            "boot: MemoryError('injected 1',); starting again on safe defaults "
            "(links, id and wlan kept from config.json)"
        ], out
        assert "cannot open" not in out  # the first attempt's socket was closed
        assert "leadwire: ready" in out and "id fault-1, boot 1," in out and "ring 256x16" in out
        assert (d / "boots").read_text() == "1"  # one boot counted, not one per attempt
        assert _socket_fds(b.pid) == 1  # no socket left over from the failed attempt
        assert b.address is not None and b.port is not None
        for link in (UdpLink(b.address), SerialLink(b.port)):
            c = Client(link)
            try:
                h = c.hello()
                # the file now says "reread" and ring 64: a retry that read it would show that
                assert (h.board_id, h.capacity, h.slot_size, h.boots) == ("fault-1", 256, 16, 1)
            finally:
                c.close()


def test_every_attempt_failing_is_not_ready(tmp_path: Path) -> None:
    d = _faulty(tmp_path)
    (d / "fail_always").write_text("")
    with pytest.raises(BoardError) as e:
        start_board("both", config={"id": "x"}, board_dir=d, build_firmware=False)
    out = str(e.value)
    assert "virtual board is not ready" in out
    assert len(_lines(out, "boot: MemoryError('injected")) == 3 and "; giving up" in out
    assert "leadwire: not ready: boot failed; fix config.json and reset" in out
    assert "leadwire: ready" not in out
    assert (d / "boots").read_text() == "1"


def test_no_link_is_not_ready(tmp_path: Path) -> None:
    held = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    held.bind(("127.0.0.1", 0))
    port = held.getsockname()[1]
    try:
        with pytest.raises(BoardError) as e:
            start_board("udp", udp_port=port, board_dir=tmp_path)
        out = str(e.value)
        assert "udp: cannot open (port %d): OSError(98" % port in out
        assert "links none" in out and "leadwire: not ready: no link; fix config.json and reset" in out
        assert "leadwire: ready" not in out
    finally:
        held.close()
