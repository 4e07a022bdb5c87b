"""The protocol core's checks on a 32-bit MicroPython: the official WebAssembly port (npm
@micropython/micropython-webassembly-pyscript 1.27.0, tools/wasm), from the same .mpy files as the
unix-port tier (tests/mpy) and the same runner (tests/mpy/core_runner.py).

What this port adds to the unix port: small ints stop at 2^30 (an offset past it is a heap object,
so heap_lock catches any that the hot path would build), and there is no native emitter, so the board
refuses _viper.mpy and the bytecode twins of crc16 / copy_into / the ring's write and answer are what runs and
is checked.
What it cannot show: the board heap size (this build grows its heap on demand: gc.mem_free() says
~134 MB after a 64K start), ARM/Xtensa native code, MicroPython 1.22.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ..mpy.test_core_on_micropython import CHECKS
from .conftest import Run

pytestmark = [pytest.mark.micropython, pytest.mark.timeout(300)]


def test_the_port_is_32_bit_without_native_code(wasm: Run, mpy_lib: Path) -> None:
    code = (
        "import sys, micropython, gc\n"
        "print(sys.implementation.version[:3], sys.implementation._mpy, sys.platform, sys.maxsize,\n"
        "      hasattr(micropython, 'heap_lock'), hasattr(gc, 'mem_alloc'))\n"
    )
    r = wasm(mpy_lib, "-c", code)
    # _mpy 774 = 0x306: .mpy version 6, sub-version 3, native arch none
    assert r.stdout.splitlines() == ["(1, 27, 0) 774 webassembly 2147483647 True True"], r.stdout + r.stderr


def test_viper_is_refused_and_the_bytecode_twins_run(wasm: Run, mpy_lib: Path) -> None:
    code = (
        "import sys\n"
        "try:\n"
        "    import leadwire._viper\n"
        "except ValueError as e:\n"
        "    print(e)\n"
        "from leadwire import bufcopy, crc16, ring\n"
        "print(crc16.crc16 is crc16.crc16_py, bufcopy.copy_into is bufcopy.copy_py,\n"
        "      'leadwire._viper' in sys.modules, 'leadwire._twins' in sys.modules, ring.answer)\n"
    )
    r = wasm(mpy_lib, "-c", code)
    assert r.stdout.splitlines() == ["native code in .mpy unsupported", "True True False True None"], (
        r.stdout + r.stderr
    )


def test_heap_lock_and_mem_alloc_see_an_int_past_2_30(wasm: Run, mpy_lib: Path) -> None:
    """The allocation checks are live on this port for what 32 bits add: 2^30 built at run time is
    a 32-byte heap object (gc.mem_alloc), MemoryError under heap_lock, and _steady reports both;
    2^30 - 1 is neither."""
    code = (
        "import sys, gc, micropython, core_runner\n"
        "top = sys.maxsize >> 1\n"  # 2^30 - 1, the largest small int (sys.maxsize is 2^31 - 1)
        "one = 1\n"
        "print(top)\n"
        "micropython.heap_lock()\n"
        "try:\n"
        "    x = top + one\n"
        "    said = 'no error'\n"
        "except MemoryError:\n"
        "    said = 'MemoryError'\n"
        "micropython.heap_unlock()\n"
        "print(said)\n"
        "try:\n"
        "    core_runner._steady(lambda: top + one, 10)\n"
        "    print('missed')\n"
        "except AssertionError as e:\n"
        "    print(e)\n"
        "core_runner._steady(lambda: top - one, 10)\n"
        "print('small ok')\n"
    )
    r = wasm(mpy_lib, "-c", code)
    assert r.stdout.splitlines() == [
        "1073741823",
        "MemoryError",
        "heap grew 320 bytes over 10 calls",
        "small ok",
    ], r.stdout + r.stderr


def test_core_checks_on_wasm(wasm: Run, mpy_lib: Path) -> None:
    """Every check of core_runner (golden vectors, 0-byte hot path under heap_lock, offsets across
    2^30, 2^31 and the 2^32 wrap), each in a fresh interpreter."""
    r = wasm(mpy_lib, *CHECKS, timeout=280)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines() == ["ok " + c for c in CHECKS] + ["%d passed, 0 failed" % len(CHECKS)], (
        r.stdout + r.stderr
    )
