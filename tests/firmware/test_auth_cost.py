"""What authentication costs the board, measured on the MicroPython unix port:

- the per-event path stays 0 bytes with a key configured; a signed frame allocates per frame (the
  HMAC: auth.py), bounded here; its CPU cost is printed next to the unsigned frame's, same run;
- the agent is still ready at 64K with auth on, both transports, and its free heap at ready is
  printed next to the same board's with auth off.

    .venv/bin/python -m tests.firmware.test_auth_cost        the figures for docs/firmware.md
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from leadwire.tools.board import start_board
from leadwire.tools.firmware_build import build

from ..mpy.conftest import mpy_cross, run_in_board_dir

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.micropython, pytest.mark.timeout(120)]


def run_costs(tmp: Path, rounds: int = 200) -> tuple[list[str], dict[str, tuple[int, float]]]:
    build("unix", tmp)
    mpy_cross(ROOT / "tests" / "mpy" / "core_runner.py", tmp / "core_runner.mpy")
    mpy_cross(ROOT / "tests" / "firmware" / "auth_runner.py", tmp / "auth_runner.mpy")
    # the runner plays the host too (a board has no auth_host: it never makes a HELLO request)
    for name in ("auth_host", "u32"):  # u32: auth_host's serial-number compare
        mpy_cross(ROOT / "shared" / "leadwire" / f"{name}.py", tmp / "leadwire" / f"{name}.mpy")
    r = run_in_board_dir(tmp, "-m", "auth_runner", str(rounds), heap="128K", timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout.splitlines()
    checks = [ln for ln in out if ln.startswith(("ok", "FAIL"))]
    costs = {p[1]: (int(p[2]), float(p[3])) for p in (ln.split() for ln in out) if p[0] == "cost"}
    assert "done 0 0 0" in out  # nothing refused: every signed poll was fresh
    return checks, costs


def test_signed_frames_cost_per_frame_never_per_event(tmp_path: Path) -> None:
    checks, costs = run_costs(tmp_path)
    assert checks == ["ok emit_with_auth", "ok unsigned_poll_answer"]
    assert costs["poll_answer_unsigned"][0] == 0
    # verify + sign: two HMACs (two sha256 objects and digests each) + the test's memoryview slice
    assert 0 < costs["sign_into_ack"][0] <= 600
    assert costs["poll_answer_signed"][0] <= 1200
    print(costs)


def ready_heap(transport: str, key: str | None, tmp: Path) -> tuple[int, int]:
    with start_board(transport, key=key, board_dir=tmp) as b:
        m = re.search(r"leadwire: ready, heap used (\d+) free (\d+)", b.console())
        assert m, b.console()
        assert ("auth on" if key else "auth off") in b.console()
        return int(m.group(1)), int(m.group(2))


@pytest.mark.parametrize("transport", ["udp", "both"])
def test_ready_at_64k_with_auth_on(transport: str, tmp_path: Path) -> None:
    free_off = ready_heap(transport, None, tmp_path / "off")[1]
    free_on = ready_heap(transport, "auto", tmp_path / "on")[1]
    print("%s: auth off free %d, auth on free %d (%d B)" % (transport, free_off, free_on, free_off - free_on))
    # the run-time need of the agent (lwboot: 10.3 KB + 3 report bodies of 512 B) still fits
    assert free_on >= 10300 + 3 * 512
    # auth.py (~6.7 KB of heap once loaded), lwauth, the key, an endpoint per link, qstrs: ~11-12 KB
    assert free_off - free_on < 13000


if __name__ == "__main__":  # the figures, printed
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        for i in range(3):
            print("run %d:" % (i + 1), run_costs(Path(d) / ("c%d" % i), 200)[1])
        for t in ("udp", "both"):
            off = ready_heap(t, None, Path(d) / (t + "off"))
            on = ready_heap(t, "auto", Path(d) / (t + "on"))
            print("%s ready at 64K: auth off used %d free %d; auth on used %d free %d" % (t, *off, *on))
    sys.exit(0)
