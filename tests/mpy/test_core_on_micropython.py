"""The protocol core's checks, run on the MicroPython unix port with a 64 KB heap.

Each check runs in its own interpreter (as one board boot), from .mpy files as a board holds them:
compiling the sources on a 64 KB heap would itself run out of memory.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .conftest import ROOT, run_checks, run_micropython

pytestmark = pytest.mark.micropython

RUNNER = ROOT / "tests" / "mpy" / "core_runner.py"
CHECKS = re.findall(r"^def (test_\w+)\(", RUNNER.read_text(), re.M)


def test_runner_has_checks() -> None:
    assert len(CHECKS) >= 15


@pytest.mark.parametrize("check", CHECKS)
def test_core_check(mpy_lib: Path, check: str) -> None:
    r = run_checks(mpy_lib, check)
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
    """mpy-cross compiles every core module MicroPython runs (the manifest's device and host ones)
    for the RP2040 (armv6m) and ESP32 (xtensawin), but _thumb (asm_thumb) for Thumb only: it refuses
    it for the ESP32, which is why tools/firmware_build.py puts it on Thumb boards only."""
    import subprocess

    from leadwire import manifest
    from leadwire.tools.firmware_build import THUMB, THUMB_ARCHS

    from .conftest import mpy_cross

    for m in manifest.DEVICE + manifest.HOST:
        src = ROOT / "shared" / "leadwire" / (m + ".py")
        out = tmp_path / (src.stem + ".mpy")
        if m == THUMB and march not in THUMB_ARCHS:
            with pytest.raises(subprocess.CalledProcessError):
                mpy_cross(src, out, march)
            continue
        mpy_cross(src, out, march)
        assert out.stat().st_size > 0


@pytest.mark.parametrize("refusal", ["incompatible .mpy arch", "incompatible .mpy file"])
def test_refused_viper_mpy_falls_back_to_bytecode(mpy_lib: Path, tmp_path: Path, refusal: str) -> None:
    """A board that refuses _viper.mpy (a RISC-V ESP32-C3 given xtensawin code; MicroPython
    1.22, native sub-version 6.2, given 6.3) runs the bytecode twins, with the same vectors and 0 bytes."""
    import shutil

    from .conftest import mpy_cross

    lib = tmp_path / "lib"
    shutil.copytree(mpy_lib, lib)
    viper = lib / "leadwire" / "_viper.mpy"
    if refusal.endswith("arch"):
        mpy_cross(ROOT / "shared" / "leadwire" / "_viper.py", viper, "armv6m")
    else:
        b = bytearray(viper.read_bytes())
        assert b[:3] == b"M\x06\x0b"  # v6, x64 (2 << 2), sub-version 3
        b[2] = (b[2] & 0xFC) | 2  # what a 1.22 build of this module would say
        viper.write_bytes(bytes(b))
    r = run_micropython(lib, "-c", "try:\n import leadwire._viper\nexcept ValueError as e:\n print(e)")
    assert r.stdout.strip() == refusal, r.stdout + r.stderr
    probe = (
        "import sys\n"
        "from leadwire import bufcopy, crc16, framing, ring\n"
        "print(crc16.crc16 is crc16.crc16_py, bufcopy.copy_into is bufcopy.copy_py,\n"
        "      'leadwire._viper' in sys.modules, 'leadwire._twins' in sys.modules, ring.answer)\n"
    )
    r = run_micropython(lib, "-c", probe)
    assert r.stdout.split() == ["True", "True", "False", "True", "None"], r.stdout + r.stderr
    checks = [
        "test_crc16_vectors",
        "test_alloc_copy",
        "test_write_samples_equals_writes",
        "test_alloc_write_samples",
        "test_alloc_ring_write",
        "test_alloc_answer_into",
    ]
    r = run_checks(lib, *checks)
    assert r.stdout.splitlines() == ["ok " + c for c in checks] + ["6 passed, 0 failed"], r.stdout + r.stderr
    # the serial receive path's twin (framing.scan), in an interpreter of its own (64 KB: the
    # vectors' 2 KB frame)
    checks = ["test_scan_vectors", "test_alloc_stream_decoder"]
    r = run_checks(lib, *checks)
    assert r.stdout.splitlines() == ["ok " + c for c in checks] + ["2 passed, 0 failed"], r.stdout + r.stderr
