# Runs on the MicroPython unix port from a built board directory: the agent's hot
# path allocates nothing in steady state. Usage: micropython -m agent_runner UDP_PORT
# Prints "ok NAME" / "FAIL NAME: why" per check and "udp NAME BYTES" measurements.
import gc
import sys

from core_runner import _steady
from lwagent import Agent, _send

from leadwire import device as dv
from leadwire import wire
from leadwire.device import respond
from leadwire.framing import StreamDecoder, encode_into, scan
from leadwire.ring import EventRing


class Sink:
    # a serial port that cuts writes short, as rp2's UART does with a full TX ring
    # (write(buf, off, n) as UART and FileIO have): at most 100 bytes a call, and every 16th call
    # nothing (None). Counts the bytes taken and the frames (their 0 delimiters), allocation-free.
    def __init__(self):
        self.n = 0
        self.k = 0  # frames (delimiters taken)
        self.c = 0  # calls

    def write(self, b, off, n):
        self.c += 1
        if not self.c & 15:
            return None
        if n > 100:
            n = 100
        for i in range(off, off + n):
            if not b[i]:
                self.k += 1
        self.n += n
        return n


class Board:
    KIND = "unix"

    @staticmethod
    def reset_cause():
        return 0


K = [256, 16, 1, 8, 5000, 9, 7, 0, 1000, 250, 512, 1000, 0, 3, 1]
ring = EventRing(256, None, 16, 1)
sample = bytearray(16)
ag = Agent(K, ring, [[1, 1000, 16, 0, 0, sample]], [], Board)


def rx(L, b, n):
    # one checked frame as lwagent's io loop hands it over: the core's responder, then what it
    # leaves to the agent (Agent._rx)
    m = respond(L, b, n, None, ring, _send)
    if m:
        ag._rx(L, b, n, None, m)


tx = bytearray(256)
sink = Sink()
L = [
    sink,
    False,
    tx,
    memoryview(tx),
    None,
    0,
    0,
    {},
    {},
    [],
    None,
    b"",
    bytearray(64),
    bytearray(260),
    StreamDecoder(128),
    None,  # auth endpoint: off (auth_runner.py measures the signed path)
    256 - 12,  # payload budget of a frame
    -1,  # the last POLL answered (messages.poll_key): none yet
]
hello = bytearray(64)
L[11] = bytes(hello[: dv.hello_into(hello, 1, 256, 16, 256, 1, ("t", "0.1.0", "unix"))])
ag.links.append(L)
pf = bytearray(16)
hf = bytearray(12)
wire.put_header(hf, wire.HELLO, wire.F_LAST, 0, 0, 9, 0, 0, 0, 0)
wire.seal(hf, 0)
enc = bytearray(32)
for _ in range(300):
    ag.emit(1, sample, 16)


tg = [7]  # the POLLs' tag: a new one each time, as a client's (a repeated tag and n is a copy)


def make_poll(back):
    # POLL n = newest - back (on halves: no big ints), 255 events, 2047 bytes, the next tag
    lo = ring._st[2] - back
    hi = ring._st[1]
    if lo < 0:
        lo += 0x10000
        hi = (hi - 1) & 0xFFFF
    tg[0] = (tg[0] + 1) & 0xFF
    wire.put_header(pf, wire.POLL, wire.F_LAST, 0, 0, tg[0], 0, 4, hi, lo)
    pf[10] = 0
    pf[11] = 255
    pf[12] = 0x07
    pf[13] = 0xFF
    wire.seal(pf, 4)


pb = bytearray(17)


def serial_burst():
    # POLL n = newest - 80 asking for a burst of 4 frames of up to 20 events (payload byte 4)
    for _ in range(80):
        ag.emit(1, sample, 16)
    lo = ring._st[2] - 80
    hi = ring._st[1]
    if lo < 0:
        lo += 0x10000
        hi = (hi - 1) & 0xFFFF
    tg[0] = (tg[0] + 1) & 0xFF
    wire.put_header(pb, wire.POLL, wire.F_LAST, 0, 0, tg[0], 0, 5, hi, lo)
    pb[10] = 0
    pb[11] = 20
    pb[12] = 0x07
    pb[13] = 0xFF
    pb[14] = 4
    wire.seal(pb, 5)
    k = sink.k
    n = sink.n
    rx(L, pb, 17)
    assert sink.k - k == 4, sink.k - k  # 4 frames went out (of ~12 events each: 256-byte frames)
    assert sink.n - n > 800, sink.n - n  # whole: each frame in 3 partial writes or more


def emit_one():
    dv.sample_into(sample, 1234)
    ag.emit(1, sample, 16)


def serial_poll():
    make_poll(20)
    rx(L, pf, 16)


def serial_bytes_in():
    # a POLL arriving COBS-framed: the scan (native: the COBS decode and wire.check) as the io
    # loop calls it, the answer, COBS out
    make_poll(5)
    m = encode_into(pf, 16, enc, 0)
    enc[m] = 0
    dec = L[14]
    p = 0
    while p <= m:
        dec.st[4] = m + 1
        p = scan(enc, p, dec.frame, dec.st)
        if dec.st[2] > 0:
            rx(L, dec.frame, dec.st[2])


def hello_answer():
    rx(L, hf, 12)


def check(name, fn):
    try:
        _steady(fn, 200)
        print("ok", name)
    except AssertionError as e:
        print("FAIL %s: %s" % (name, e))


check("emit", emit_one)
check("serial_poll_answer", serial_poll)
check("serial_cobs_in_answer_out", serial_bytes_in)
check("hello_answer", hello_answer)
check("serial_burst_answer", serial_burst)
assert sink.n > 0

del sys.modules["core_runner"]  # make room: the checks are done
gc.collect()

# UDP: what one received datagram and one answer cost (recvfrom, memoryview slice for sendto)
import socket  # noqa: E402

port = int(sys.argv[1])
a = socket.getaddrinfo("127.0.0.1", port)[0][-1]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(a)
mv = memoryview(tx)
for i in range(3):
    s.sendto(pf, a)
    gc.collect()
    gc.disable()
    m0 = gc.mem_alloc()
    d, peer = s.recvfrom(128)
    m1 = gc.mem_alloc()
    s.sendto(mv[:64], peer)
    m2 = gc.mem_alloc()
    gc.enable()
    s.recvfrom(128)
    if i == 2:
        print("udp recvfrom", m1 - m0)
        print("udp sendto_slice", m2 - m1)
