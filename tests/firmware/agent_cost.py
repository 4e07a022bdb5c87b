# Where a virtual board's time goes, per event and per frame (MicroPython unix port, run from a
# built board directory by bench_board.py): micropython -X heapsize=64K agent_cost.py PORT
# Prints "cost NAME MICROSECONDS" lines: the best of 5 rounds (the machine is shared).
import gc
import socket
import sys
import time

from lwagent import Agent

from leadwire import device as dv
from leadwire.framing import encode_into
from leadwire.ring import EventRing


class Board:
    KIND = "unix"

    @staticmethod
    def reset_cause():
        return 0


K = [250, 64, 1, 8, 5000, 9, 7, 0, 1000, 250, 512, 1000, 0, 3, 1]
ring = EventRing(200, None, 64, 1)  # (250 left too little heap for the sendto step at 64K)
s = bytearray(64)
ag = Agent(K, ring, [[1, 0, 64, 0, 0, s]], [], Board)
buf = bytearray(1472)
cb = bytearray(1500)
mv = memoryview(buf)
a = socket.getaddrinfo("127.0.0.1", int(sys.argv[1]))[0][-1]
rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
rx.bind(a)
tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
N = 20000
M = 2000


def best(name, fn, per):
    b = None
    gc.collect()
    for _ in range(5):
        t = time.ticks_us()
        fn()
        dt = time.ticks_diff(time.ticks_us(), t)
        b = dt if b is None or dt < b else b
    print("cost %s %.2f" % (name, b / per))


def ring_write():
    for _ in range(N):
        ring.write(s, 1, 64)


def write_samples():  # a sensor pass with no push session: batches of 200 samples in one call
    for i in range(N // 200):
        ring.write_samples(s, 1, 64, 200, i)


def emit():  # what a sensor pass does per event: sample number, ring (no push session)
    for i in range(N):
        dv.sample_into(s, i)
        ag.emit(1, s, 64)


def answer():  # one full 1,472-byte EVENTS frame (21 events of 64 B)
    hi = ring._st[1]
    lo = (ring._st[2] - 200) & 0xFFFF
    for _ in range(M):
        ring.answer_into(buf, hi, lo, 255, 2047, 1, 0)


def sendto():  # one 1,422-byte datagram out (and read back, in batches, so the socket never fills)
    for i in range(M):
        tx.sendto(mv[:1422], a)
        if i % 50 == 49:
            for _ in range(50):
                rx.recv(2048)


def cobs():  # the same frame COBS-encoded for the serial link
    for _ in range(M):
        encode_into(buf, 1422, cb, 0)


best("ring_write_per_event", ring_write, N)
best("sample_emit_per_event", emit, N)
best("write_samples_per_event", write_samples, N)
answer()
print("cost events_per_frame %d" % buf[10])
best("answer_into_per_frame", answer, M)
best("sendto_per_frame", sendto, M)
best("cobs_encode_per_frame", cobs, M)
