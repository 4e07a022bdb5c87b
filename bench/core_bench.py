"""Protocol core benchmark: hot-path rates on the MicroPython unix port and on CPython, side by side.

Run: .venv/bin/python bench/core_bench.py      (after `make test` has built .venv)
Prints ring append and poll-answer rates, CRC candidates, and wire overhead against MAVLink v2.
"""

from __future__ import annotations

import binascii
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import crcmod.predefined

from leadwire import wire
from leadwire.crc16 import crc16_py
from leadwire.ring import EventRing
from leadwire.tools.testbed import need_tool as tool  # a missing one: what to install, exit 2

ROOT = Path(__file__).resolve().parents[1]


def run_on_micropython(args: list[str], heap: str = "64K", extra: Path | None = None) -> dict[str, int]:
    """The core (and `extra`) compiled to .mpy in a fresh folder, then `micropython ARGS` on it; its
    output lines "name value" as a dict."""
    with tempfile.TemporaryDirectory() as d:
        lib = Path(d)
        (lib / "leadwire").mkdir()
        core = (ROOT / "shared" / "leadwire").glob("*.py")
        srcs = [(src, lib / "leadwire" / (src.stem + ".mpy")) for src in core]
        if extra is not None:
            srcs.append((extra, lib / (extra.stem + ".mpy")))
        for src, out in srcs:
            subprocess.run([tool("mpy-cross"), "-march=x64", "-o", str(out), str(src)], check=True)
        r = subprocess.run(
            [tool("micropython"), "-X", "heapsize=" + heap, *args],
            env={"MICROPYPATH": str(lib)}, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    if r.returncode:
        sys.exit("bench: micropython failed: " + (r.stderr.strip().splitlines() or ["?"])[-1])
    return {k: int(v) for k, v in (line.split() for line in r.stdout.splitlines())}


def micropython_figures(heap: str = "64K") -> dict[str, int]:
    return run_on_micropython(["-m", "mpy_core_bench"], heap, ROOT / "bench" / "mpy_core_bench.py")


AUTH_SNIPPET = """
import gc, time
from leadwire import auth, auth_host, wire
from leadwire.ring import EventRing
ring = EventRing(256, 0xFFFFF000, 64)
p = bytearray(64)
for i in range(40):
    ring.write(p, 1, 64)
n = ring.newest() - 30
buf = bytearray(1420)
size = ring.answer_into(buf, n >> 16, n & 0xFFFF, 20, 1400)
dev = auth.Endpoint(bytes(range(32)), auth.TO_HOST)
host = auth_host.HostEndpoint(bytes(range(32)))
host.live = 1
def one():
    m = dev.sign_into(buf, size)
    r = host.verify(buf, m)
    buf[1] &= 0xDF
    wire.seal(buf, size - 12)
    return r
one()
gc.collect()
gc.disable()
a = gc.mem_alloc()
m = dev.sign_into(buf, size)
b = gc.mem_alloc()
host.verify(buf, m)
c = gc.mem_alloc()
gc.enable()
buf[1] &= 0xDF
wire.seal(buf, size - 12)
k = 300
t = time.ticks_us()
for _ in range(k):
    dev.sign_into(buf, size)
    buf[1] &= 0xDF
    wire.seal(buf, size - 12)
sign_us = time.ticks_diff(time.ticks_us(), t) / k
print("frame_bytes", size)
print("sign_alloc", b - a)
print("verify_alloc", c - b)
print("sign_ns", int(sign_us * 1000))
print("verify_ok", one())
"""


def micropython_auth_figures(heap: str = "64K") -> dict[str, int]:
    """Signing a 20-event answer on the MicroPython unix port: time and heap per frame."""
    return run_on_micropython(["-c", AUTH_SNIPPET], heap)


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
    n = ring.newest() - 40

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
    au = micropython_auth_figures()
    signed = au["frame_bytes"] + wire.AUTH_SIZE
    over = wire.OVERHEAD + wire.AUTH_SIZE
    print("  signed (auth): %d B per frame (MAVLink v2 signed: 25; ratio %.2f); the same batch: %d B frame,"
          " %.2f B per event" % (over, over / 25, signed, (signed - 20 * 64) / 20))  # fmt: skip
    us = au["sign_ns"] / 1000
    print("  signing on the MicroPython unix port: %.1f us per %d B frame (%.2f us per event), heap %d B per"
          " frame signed and %d B verified (per frame, never per event)" % (
              us, signed, us / 20, au["sign_alloc"], au["verify_alloc"]))  # fmt: skip
    assert au["verify_ok"] == wire.OK


if __name__ == "__main__":
    main()
