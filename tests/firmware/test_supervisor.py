"""Tasks that fail are restarted, a fatal error resets the board, the watchdog is fed, and two
boots never share an epoch even with a constant os.urandom.

On the MicroPython unix port: a board whose ring refuses one batch of samples with a MemoryError
(tests/firmware/flaky_board.py), and the Pico of test_serial_only (boards/rp2.py with a fake
`machine`: its WDT and reset() leave files behind)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from leadwire import messages
from leadwire.tools.board import BoardError, start_board
from leadwire.tools.firmware_build import build
from leadwire.tools.wireclient import Client, SerialLink, UdpLink
from leadwire.u32 import add

from ..hil.test_hil import catch_up, first_range
from ..mpy.conftest import mpy_cross
from .test_serial_only import PICO_HEAP, pico_dir

HERE = Path(__file__).resolve().parent
pytestmark = [pytest.mark.micropython, pytest.mark.timeout(60)]


def test_a_task_that_fails_is_restarted_and_counted(tmp_path: Path) -> None:
    d = tmp_path / "board"
    build("unix", d)
    (d / "boards" / "unix.mpy").rename(d / "boards" / "unix_base.mpy")  # the test board imports it
    mpy_cross(HERE / "flaky_board.py", d / "boards" / "unix.mpy")
    (d / "fail_at").write_text("20")  # the 20th batch of samples (one per sample at 50 Hz): 0.4 s
    cfg = {"sensors": [{"ch": 1, "hz": 50, "size": 8}], "health": {"ms": 300}, "ring": 256, "slot": 16}
    with start_board("udp", config=cfg, board_dir=d, build_firmware=False) as b:
        assert b.address is not None
        c = Client(UdpLink(b.address))
        try:
            n0, _ = first_range(c)
            time.sleep(2.0)  # the failure, the 1 s back-off, and a second of events again
            _, got = catch_up(c, add(n0, -1))
        finally:
            c.close()
        out = b.console()
    fails = [ln for ln in out.splitlines() if ln.startswith("task:")]
    assert fails == ["task: MemoryError('injected',); 1 s"], out
    samples = [messages.decode_sample(data)[0] for _, ch, data in got if ch == 1]
    # the batch refused was never counted: the sample numbers go on without a gap or a repeat
    assert len(samples) > 40 and samples == list(range(samples[0], samples[0] + len(samples)))
    health = [messages.decode_health(data) for _, ch, data in got if ch == 8 and len(data) == 16]
    tasks = [messages.decode_health_tasks(data) for _, ch, data in got if ch == 8 and len(data) == 2]
    assert tasks and tasks[-1] == {"restarts": 1} and {t["restarts"] for t in tasks} == {1}
    assert health[-1]["uptime_s"] >= 2  # health records go on after the restart
    # one tasks record after each health record from the restart on, none before
    kinds = [len(data) for _, ch, data in got if ch == 8]
    first = kinds.index(2)
    assert kinds[first - 1 :] == [16, 2] * ((len(kinds) - first + 1) // 2)
    assert set(kinds[: first - 1]) <= {16}


def test_a_fatal_error_resets_the_board_after_a_delay(tmp_path: Path) -> None:
    # the LED fails when the agent is built (after the boot): nothing can run; the console says
    # why and the board resets after RESET_S (here 1 s; a real board: 10 s), not a REPL
    d = pico_dir(tmp_path)
    mpy_cross(HERE.parents[1] / "firmware" / "boards" / "rp2.py", d / "boards" / "pico.mpy")
    (d / "boards" / "unix.mpy").unlink()
    (d / "boards" / "unix.py").write_text("from boards.pico import *\n\nRESET_S = 1\n")
    (d / "fatal").write_text("")
    t0 = time.monotonic()
    with pytest.raises(BoardError) as e:
        start_board("serial", config={}, board_dir=d, build_firmware=False, heap=PICO_HEAP)
    took = time.monotonic() - t0
    out = str(e.value)
    assert "leadwire: agent stopped: OSError('injected fatal',); reset in 1 s" in out, out
    assert (d / "resets").read_text() == "reset\n"  # machine.reset(), once
    assert took >= 1.0


def test_the_watchdog_is_started_with_its_timeout_and_fed(tmp_path: Path) -> None:
    d = pico_dir(tmp_path)
    with start_board("serial", config={"wdt": 3000}, board_dir=d, build_firmware=False, heap=PICO_HEAP) as b:
        time.sleep(1.0)
        log = (d / "wdt.log").read_text().splitlines()
        assert b.port is not None
    assert log[0] == "timeout 3000"  # one WDT, with the configured timeout
    assert log[1:] and all(ln.startswith("fed ") for ln in log[1:])  # fed by the source task


def test_no_watchdog_on_the_unix_port_says_so(tmp_path: Path) -> None:
    with start_board("udp", config={"wdt": 2000}, board_dir=tmp_path) as b:
        out = b.console()
    lines = [ln for ln in out.splitlines() if ln.startswith("wdt:")]
    assert lines == ["wdt: AttributeError(\"module 'machine' has no attribute 'WDT'\",); off"], out


def test_two_boots_never_share_an_epoch_with_a_constant_urandom(tmp_path: Path) -> None:
    # os.urandom always b"\0\0\0\0" (an emulated Pico's): the boot count and the board id still
    # make the epoch and the ring's start differ from boot to boot
    d = pico_dir(tmp_path)
    (d / "os.py").write_text("def urandom(n):\n    return bytes(n)\n")
    cfg = {"sensors": [{"ch": 1, "hz": 50, "size": 8}]}
    seen = []
    for boot in (1, 2, 3):
        with start_board("serial", config=cfg, board_dir=d, build_firmware=False, heap=PICO_HEAP) as b:
            assert b.port is not None
            c = Client(SerialLink(b.port))
            try:
                h = c.hello()
                n0, _ = first_range(c)
            finally:
                c.close()
        assert h.boots == boot
        seen.append((h.boot_epoch, n0))
    assert len({e for e, _ in seen}) == 3 and len({n for _, n in seen}) == 3, seen
