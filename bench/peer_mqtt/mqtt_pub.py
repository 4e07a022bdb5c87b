# The MQTT side of bench/peer_mqtt_bench.py: a MicroPython "board" publishing N events through
# umqtt.simple (micropython-lib, fetched from PyPI by the bench, never committed). Runs on the same
# MicroPython unix port and heap cap as leadwire's virtual boards, compiled with mpy-cross.
#
#   micropython -X heapsize=64K mqtt_pub.mpy HOST PORT QOS NODELAY N SIZE SECONDS
#
# Every event is SIZE bytes: a u32 big-endian sequence number (the bench's ground truth: MQTT
# itself carries no sequence the receiver could check), then filler. Prints JSON lines: "ready"
# after connect (heap live after setup), then a final summary (events published, time, heap).
import gc
import sys
import time

from umqtt.simple import MQTTClient

host = sys.argv[1]
port = int(sys.argv[2])
qos = int(sys.argv[3])
nodelay = int(sys.argv[4])
n = int(sys.argv[5])
size = int(sys.argv[6])
cap_ms = int(float(sys.argv[7]) * 1000)
topic = b"lw/b1/1"

c = MQTTClient(b"board-1", host, port)
c.connect()
if nodelay:
    # the unix port's socket module has no IPPROTO_TCP / TCP_NODELAY names: 6 and 1 (Linux)
    c.sock.setsockopt(6, 1, 1)
buf = bytearray(size)
for i in range(4, size):
    buf[i] = 0xA5
gc.collect()
gc.threshold(4096)  # as leadwire's firmware (main.py): collect after 4 KB of garbage
total = gc.mem_alloc() + gc.mem_free()
live = gc.mem_alloc()
low = gc.mem_free()
print('{"ready": 1, "heap_total": %d, "heap_live": %d}' % (total, live))

# allocation per event, measured over the first 64 events with the collector off
gc.disable()
a0 = gc.mem_alloc()
per_event = -1.0
sent = 0
t0 = time.ticks_ms()
timed_out = 0
while sent < n:
    buf[0] = (sent >> 24) & 0xFF
    buf[1] = (sent >> 16) & 0xFF
    buf[2] = (sent >> 8) & 0xFF
    buf[3] = sent & 0xFF
    c.publish(topic, buf, qos=qos)
    sent += 1
    if qos and c.pid >= 65535:
        # umqtt.simple counts pid up without bound: past 65535 it packs a truncated id (0 is
        # invalid in MQTT) and never matches the PUBACK; wrap it as the spec intends (1..65535)
        c.pid = 0
    if sent == 64:
        per_event = (gc.mem_alloc() - a0) / 64
        gc.enable()
        gc.collect()
    if not sent & 63:
        f = gc.mem_free()
        if f < low:
            low = f
        if time.ticks_diff(time.ticks_ms(), t0) >= cap_ms:
            timed_out = 1
            break
dt = time.ticks_diff(time.ticks_ms(), t0)
gc.enable()
c.disconnect()
gc.collect()
print(
    '{"sent": %d, "ms": %d, "timed_out": %d, "heap_total": %d, "heap_live": %d, "heap_low_free": %d, '
    '"alloc_per_event": %.1f}' % (sent, dt, timed_out, total, live, low, per_event)
)
