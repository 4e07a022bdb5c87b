# Runs on the MicroPython unix port (driven by bench/core_bench.py): core hot-path rates.
# Prints one "name value" line per figure.
import binascii
import gc
import time

from leadwire import wire
from leadwire.crc16 import crc16, crc16_py
from leadwire.ring import EventRing


def rate(fn, n):
    gc.collect()
    t0 = time.ticks_us()
    for _ in range(n):
        fn()
    dt = time.ticks_diff(time.ticks_us(), t0)
    return n * 1000000 // max(dt, 1)


ring = EventRing(256, 0xFFFFF000, 64)
payload = bytearray(64)
buf = bytearray(1400 + wire.OVERHEAD)


def write():
    ring.write(payload, 1, 64)


print("ring_write_per_s", rate(write, 20000))

state = [0]


def poll_batch():
    # 20 new events then one batched answer of all 20 (1 poll = 20 events on the wire)
    for _ in range(20):
        ring.write(payload, 1, 64)
    lo = ring._lo - 20
    hi = ring._hi
    if lo < 0:
        lo += 0x10000
        hi = (hi - 1) & 0xFFFF
    state[0] = ring.answer_into(buf, hi, lo, 20, 1400)


print("poll20_per_s", rate(poll_batch, 2000))
print("poll20_frame_bytes", state[0])


# answer_into alone: 20 x 64 B events from a full ring
lo = ring._lo - 40
hi = ring._hi
if lo < 0:
    lo += 0x10000
    hi = (hi - 1) & 0xFFFF


def answer20():
    ring.answer_into(buf, hi, lo, 20, 1400)


print("answer20_per_s", rate(answer20, 5000))

frame = bytearray(1024)
print("crc16_viper_kb_s", rate(lambda: crc16(frame, 0, 1024), 2000))
print("crc16_bytecode_kb_s", rate(lambda: crc16_py(frame, 0, 1024), 200))
print("crc32_builtin_kb_s", rate(lambda: binascii.crc32(frame), 20000))
