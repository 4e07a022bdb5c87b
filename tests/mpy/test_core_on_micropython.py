"""The protocol core's checks, run on the MicroPython unix port with a 64 KB heap.

Each check runs in its own interpreter (as one board boot), from .mpy files as a board holds them:
compiling the sources on a 64 KB heap would itself run out of memory.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .conftest import ROOT, run_micropython

pytestmark = pytest.mark.micropython

RUNNER = ROOT / "tests" / "mpy" / "core_runner.py"
CHECKS = re.findall(r"^def (test_\w+)\(", RUNNER.read_text(), re.M)


def test_runner_has_checks() -> None:
    assert len(CHECKS) >= 15


@pytest.mark.parametrize("check", CHECKS)
def test_core_check(mpy_lib: Path, check: str) -> None:
    r = run_micropython(mpy_lib, "-m", "core_runner", "tests/vectors", check)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[0] == "ok " + check, r.stdout + r.stderr
    assert r.stdout.splitlines()[-1] == "1 passed, 0 failed"


def test_allocation_check_detects_allocation(mpy_lib: Path) -> None:
    """The 0-byte assertion is live: a function that allocates must fail it."""
    code = (
        "import core_runner as c\n"
        "try:\n"
        "    c._steady(lambda: bytearray(8), 10)\n"
        "    print('missed')\n"
        "except AssertionError as e:\n"
        "    print('caught', e)\n"
    )
    r = run_micropython(mpy_lib, "-c", code)
    assert r.stdout.startswith("caught heap grew"), r.stdout + r.stderr


@pytest.mark.parametrize("march", ["armv6m", "xtensawin"])
def test_core_compiles_for_boards(tmp_path: Path, march: str) -> None:
    """mpy-cross compiles every core module for the RP2040 (armv6m) and ESP32 (xtensawin)."""
    from .conftest import mpy_cross

    for src in sorted((ROOT / "shared" / "leadwire").glob("*.py")):
        out = tmp_path / (src.stem + ".mpy")
        mpy_cross(src, out, march)
        assert out.stat().st_size > 0
