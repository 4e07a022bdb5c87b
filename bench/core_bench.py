"""Protocol core benchmark: hot-path rates on the MicroPython unix port and on CPython, side by side.

Run: .venv/bin/python bench/core_bench.py      (after `make test` has built .venv)
Prints ring append and poll-answer rates, CRC candidates, and wire overhead against MAVLink v2.
"""

from __future__ import annotations

import binascii
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import crcmod.predefined

from leadwire import wire
from leadwire.crc16 import crc16_py
from leadwire.ring import EventRing

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    p = BIN / name
    found = str(p) if p.exists() else shutil.which(name)
    if not found:
        sys.exit("bench: `%s` not found; run `make test` first to build .venv" % name)
    return found


def micropython_figures(heap: str = "64K") -> dict[str, int]:
    with tempfile.TemporaryDirectory() as d:
        lib = Path(d)
        (lib / "leadwire").mkdir()
        for src in (ROOT / "shared" / "leadwire").glob("*.py"):
            subprocess.run([tool("mpy-cross"), "-march=x64", "-o", str(lib / "leadwire" / (src.stem + ".mpy")), str(src)], check=True)  # noqa: E501
        subprocess.run([tool("mpy-cross"), "-march=x64", "-o", str(lib / "mpy_core_bench.mpy"), str(ROOT / "bench" / "mpy_core_bench.py")], check=True)  # noqa: E501
        r = subprocess.run(
            [tool("micropython"), "-X", "heapsize=" + heap, "-m", "mpy_core_bench"],
            env={"MICROPYPATH": str(lib)},
            capture_output=True,
            text=True,
            timeout=300,
        )
    if r.returncode:
        sys.exit("bench: micropython failed: " + r.stderr.strip().splitlines()[-1])
    return {k: int(v) for k, v in (line.split() for line in r.stdout.splitlines())}


def cpython_rate(fn, n: int) -> float:  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return n / (time.perf_counter() - t0)


def cpython_figures() -> dict[str, float]:
    ring = EventRing(256, 0xFFFFF000, 64)
    payload = bytearray(64)
    buf = bytearray(1412)
    out: dict[str, float] = {}
    out["ring_write_per_s"] = cpython_rate(lambda: ring.write(payload, 1, 64), 200000)
    n = ring.newest - 40

    out["answer20_per_s"] = cpython_rate(lambda: ring.answer_into(buf, n >> 16, n & 0xFFFF, 20, 1400), 50000)
    frame = bytes(1024)
    crcmod_fun = crcmod.predefined.mkCrcFun("crc-ccitt-false")
    out["crc16_crcmod_kb_s"] = cpython_rate(lambda: crcmod_fun(frame), 200000)
    out["crc16_bytecode_kb_s"] = cpython_rate(lambda: crc16_py(frame, 0, 1024), 500)
    out["crc32_builtin_kb_s"] = cpython_rate(lambda: binascii.crc32(frame), 200000)
    return out


def main() -> None:
    print("leadwire core benchmark (MicroPython %s unix port at 64K heap, and CPython %s)" % (
        "1.29", sys.version.split()[0]))  # fmt: skip
    mp = micropython_figures()
    cp = cpython_figures()
    rows = [
        ("ring.write, 64 B events/s", mp["ring_write_per_s"], cp["ring_write_per_s"]),
        ("answer_into, 20 x 64 B batches/s", mp["answer20_per_s"], cp["answer20_per_s"]),
        ("  = events/s answered", mp["answer20_per_s"] * 20, cp["answer20_per_s"] * 20),
        ("write 20 + answer 20, cycles/s", mp["poll20_per_s"], float("nan")),
        ("  = events/s end to end on the device", mp["poll20_per_s"] * 20, float("nan")),
    ]
    print("\n%-42s %14s %14s" % ("hot path", "MicroPython", "CPython"))
    for name, a, b in rows:
        print("%-42s %14.0f %14.0f" % (name, a, b))
    print("\nCRC over 1 KiB frames (KiB/s)")
    print("  MicroPython: CRC-16 viper %d, CRC-16 bytecode %d, CRC-32 built-in C %d" % (
        mp["crc16_viper_kb_s"], mp["crc16_bytecode_kb_s"], mp["crc32_builtin_kb_s"]))  # fmt: skip
    print("    ratio CRC-16 viper / CRC-32 C = %.2f; viper / bytecode = %.0fx" % (
        mp["crc16_viper_kb_s"] / mp["crc32_builtin_kb_s"], mp["crc16_viper_kb_s"] / mp["crc16_bytecode_kb_s"]))  # fmt: skip  # noqa: E501
    print("  CPython: CRC-16 crcmod %.0f, CRC-32 binascii %.0f (ratio %.2f)" % (
        cp["crc16_crcmod_kb_s"], cp["crc32_builtin_kb_s"], cp["crc16_crcmod_kb_s"] / cp["crc32_builtin_kb_s"]))  # fmt: skip  # noqa: E501
    frame = mp["poll20_frame_bytes"]
    print("\nWire overhead")
    print("  per frame: header %d + CRC %d = %d B (MAVLink v2: 12 unsigned, 25 signed); with CRC-32: %d B" % (
        wire.HEADER_SIZE, wire.CRC_SIZE, wire.OVERHEAD, wire.HEADER_SIZE + 4))  # fmt: skip
    print("  batch of 20 x 64 B events: %d B frame, %.2f B overhead per event (%.1f%%)" % (
        frame, (frame - 20 * 64) / 20, 100 * (frame - 20 * 64) / frame))  # fmt: skip


if __name__ == "__main__":
    main()
