# Runs on the MicroPython unix port from a built board directory: what authentication costs the
# agent per frame. Usage: micropython -X heapsize=128K -m auth_runner [ROUNDS]
# Prints "ok NAME" / "FAIL NAME: why" for the 0-byte checks and "cost NAME BYTES US" per frame:
# heap bytes allocated (gc.mem_alloc delta, collector off) and CPU microseconds (ticks_us, the
# mean over ROUNDS), for the same work unsigned (a link with auth off) and signed, side by side.
import gc
import sys
import time

import lwauth
from core_runner import _steady
from lwagent import Agent, _send

from leadwire import auth, auth_host, wire
from leadwire import device as dv
from leadwire.device import respond
from leadwire.framing import StreamDecoder
from leadwire.ring import EventRing

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 200
BLOCKS = 5
KEY = bytes(range(32))
# ROUNDS + 10 signed polls a block: 25 KB at 200 rounds, one block allocated first (the heap is
# not yet in pieces)
NS = BLOCKS * (ROUNDS + 10) + 4
signed = bytearray(24 * NS)  # NS signed polls of 24 bytes


class Sink:
    # a serial port that takes everything (write(buf, off, n), as UART and FileIO have)
    def __init__(self):
        self.n = 0
        self.k = 0

    def write(self, b, off, n):
        self.n += n
        self.k += 1
        return n


class Board:
    KIND = "unix"

    @staticmethod
    def reset_cause():
        return 0


def link(ep):
    tx = bytearray(256 + 8)
    ax = 8 if ep else 0
    return [
        Sink(),
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
        bytearray(280),
        StreamDecoder(136),
        ep,
        256 - 12 - ax,
        -1,  # the last POLL answered (messages.poll_key): none yet
    ]


K = [256, 16, 1, 8, 5000, 9, 7, 0, 1000, 250, 512, 1000, 0, 3, 1]
ring = EventRing(256, None, 16, 0x12345678)
sample = bytearray(16)
A = lwauth.link(auth.Key(KEY), 0x1234, 0x5678)  # as main.py makes it (lwauth.setup)
dev = A[7]
host = auth_host.HostEndpoint(KEY)
Lp = link(None)  # auth off
La = link(A)  # auth on
ag = Agent(K, ring, [[1, 1000, 16, 0, 0, sample]], [], Board)


def rx(L, b, n):
    # one checked frame as lwagent's io loop hands it over: the core's responder, then what it
    # leaves to the agent (Agent._rx)
    m = respond(L, b, n, None, ring, _send)
    if m:
        ag._rx(L, b, n, None, m)


ag.links += [La, Lp]  # (a Sink cannot be registered with select.poll)
for L in (La, Lp):
    hb = bytearray(64)
    m = dv.hello_into(hb, 0x12345678, 256, 16, 256, 1, ("t", "0.1.0", "unix"), 4 if L[15] else 0)
    L[11] = bytes(hb[:m])
for _ in range(300):
    ag.emit(1, sample, 16)

# the handshake: the host's signed HELLO request, the board's answer
hr = bytearray(20)
wire.put_header(hr, wire.HELLO, wire.F_LAST, 0, 0, 1, 0, 0, 0xBEEF, 0x0001)
wire.seal(hr, 0)
rx(La, hr, host.host_sign_hello(hr, 12))
assert dev.live and La[0].k == 1
ans = La[2]
# the answer went through COBS to the sink: take it from the agent's tx buffer instead
m = 10 + ((ans[4] & 7) << 8 | ans[5]) + 10
assert host.host_hello(ans, m) == wire.OK, "handshake"


def make_poll(buf, back, events, max_bytes, tag=7):
    # POLL n = newest - back (on halves). Consecutive POLLs need new tags, as a client's: one with
    # the tag and n of the POLL answered last is a copy, not answered (messages.poll_key)
    lo = ring._st[2] - back
    hi = ring._st[1]
    if lo < 0:
        lo += 0x10000
        hi = (hi - 1) & 0xFFFF
    wire.put_header(buf, wire.POLL, wire.F_LAST, 0, 0, tag, 0, 4, hi, lo)
    buf[10] = 0
    buf[11] = events
    buf[12] = max_bytes >> 8
    buf[13] = max_bytes & 0xFF
    return wire.seal(buf, 4)


plain = bytearray(16)
make_poll(plain, 10, 10, 240)
plain2 = bytearray(16)
make_poll(plain2, 10, 10, 240, 8)
plains = [plain, plain2]
pi = [0]


def plain_poll(L):
    # the unsigned POLL, its tag 7 and 8 in turn (allocates nothing)
    i = pi[0] ^ 1
    pi[0] = i
    rx(L, plains[i], 16)


# the signed polls, made before any measurement (each counter is accepted once)
pb = bytearray(24)
for i in range(NS):
    host.sign_into(pb, make_poll(pb, 10, 10, 240, i & 0xFF))
    signed[24 * i : 24 * i + 24] = pb
sv = memoryview(signed)


def emit_one():
    dv.sample_into(sample, 1234)
    ag.emit(1, sample, 16)


def check(name, fn):
    try:
        _steady(fn, ROUNDS)
        print("ok", name)
    except AssertionError as e:
        print("FAIL %s: %s" % (name, e))


# with a key configured the per-event path is the same: 0 bytes
check("emit_with_auth", emit_one)
check("unsigned_poll_answer", lambda: plain_poll(Lp))


def cost(name, fn):
    # heap bytes per call (over 10 calls, the collector off: the signed ones allocate ~1.2 KB
    # each, and the runner's heap of 128K has ~23 KB free here) and CPU us
    # per call: the best of BLOCKS blocks of ROUNDS calls (the machine is shared: the least
    # disturbed block); the caller interleaves the blocks of the things it compares
    gc.collect()
    gc.disable()
    a = gc.mem_alloc()
    for _ in range(10):
        fn()
    grown = gc.mem_alloc() - a
    gc.enable()
    gc.collect()
    t = time.ticks_us()
    for _ in range(ROUNDS):
        fn()
    us = time.ticks_diff(time.ticks_us(), t) / ROUNDS
    best = res.get(name)
    if best is None or us < best[1]:
        res[name] = (grown // 10, us)


res: dict = {}
at = [0]


def signed_poll():
    i = at[0]
    at[0] = i + 1
    rx(La, sv[24 * i : 24 * i + 24], 24)  # the slice: 1 small object, counted


tx = bytearray(64 + 8)
k = [0]


def sign_only():
    m = dv.ack_into(tx, 0, 0, 0, 0, 200)
    dev.sign_into(tx, m)


# what one frame costs: a poll answered unsigned vs verified + answered + signed (COBS + write to
# a serial sink both times), and the tag alone (sign_into of a 14-byte ACK)
k0 = La[0].k
for _ in range(BLOCKS):  # side by side: the blocks of the three interleaved
    cost("poll_answer_unsigned", lambda: plain_poll(Lp))
    cost("poll_answer_signed", signed_poll)
    cost("sign_into_ack", sign_only)
assert La[0].k - k0 == BLOCKS * (ROUNDS + 10), "every signed poll answered"
for name in ("poll_answer_unsigned", "poll_answer_signed", "sign_into_ack"):
    print("cost %s %d %.1f" % (name, res[name][0], res[name][1]))
gc.collect()
print("done", dev.forged, dev.replayed, dev.unsigned)
