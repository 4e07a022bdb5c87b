"""The agent's hot path on the MicroPython unix port with a 64 KB heap: 0 bytes per event."""

from __future__ import annotations

from pathlib import Path

import pytest

from leadwire.tools.board import free_udp_port
from leadwire.tools.firmware_build import build

from ..mpy.conftest import mpy_cross, run_in_board_dir

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.micropython, pytest.mark.timeout(120)]


def test_hot_path_allocates_nothing(tmp_path: Path) -> None:
    build("unix", tmp_path)
    mpy_cross(ROOT / "tests" / "mpy" / "core_runner.py", tmp_path / "core_runner.mpy")
    mpy_cross(ROOT / "tests" / "firmware" / "agent_runner.py", tmp_path / "agent_runner.mpy")
    # 128K: the checks import tests/mpy/core_runner (large) for _steady; the 0-byte result does
    # not depend on the heap size (the agent at 64K: `leadwire board`, the HIL heap test)
    r = run_in_board_dir(tmp_path, "-m", "agent_runner", str(free_udp_port()), heap="128K")
    out = r.stdout.splitlines()
    assert r.returncode == 0, r.stdout + r.stderr
    assert [ln for ln in out if ln.startswith(("ok", "FAIL"))] == [
        "ok emit",
        "ok serial_poll_answer",
        "ok serial_cobs_in_answer_out",
        "ok hello_answer",
        "ok serial_burst_answer",
    ]
    udp = {ln.split()[1]: int(ln.split()[2]) for ln in out if ln.startswith("udp")}
    # per datagram, not per event: the received bytes and the peer address, and one memoryview
    assert 0 < udp["recvfrom"] <= 256 and 0 < udp["sendto_slice"] <= 64, udp
