# Runs the protocol core's checks under the MicroPython unix port (also valid CPython).
# Usage: MICROPYPATH=shared micropython -X heapsize=64K tests/mpy/core_runner.py VECTOR_DIR [name...]
# Prints "ok NAME" or "FAIL NAME: why" per check, then "N passed, M failed".
import gc
import json
import sys

try:
    import micropython
except ImportError:
    micropython = None

from binascii import hexlify, unhexlify

# Each check imports only what it uses: on a 64 KB heap every loaded module counts.
from leadwire import wire

VEC = sys.argv[1] if len(sys.argv) > 1 else "tests/vectors"


def load(name):
    """Yield the elements of a vector file (a JSON array written one element per line). Each line
    is read after a collection: the last one's garbage freed, a line of 8 KB (frames.json) finds
    its block on the 64 KB heap."""
    gc.collect()
    with open(VEC + "/" + name) as f:
        while True:
            gc.collect()
            line = f.readline()
            if not line:
                break
            line = line.strip().rstrip(",")
            if line and line not in ("[", "]"):
                v = json.loads(line)
                line = None  # (its text is not kept while the element is used)
                yield v


def h(s):
    return unhexlify(s)


# EventRing's state slots (ring.py's _S* numbers): _st[0] the newest's slot, [1] [2] the newest
# offset's halves, [3] the events held, [7] the last distance, [8] [9] [10] where a burst goes on
# (the last offset carried, the backlog)


def eq(a, b, what):
    if a != b:
        raise AssertionError("%s: %r != %r" % (what, a, b))


# -- vectors ------------------------------------------------------------------------------


def test_crc16_vectors():
    from leadwire.crc16 import crc16, crc16_py

    for v in load("crc16.json"):
        d = h(v["data"])
        eq(crc16(d, 0, len(d)), v["crc"], "crc16 " + v["data"][:16])
        eq(crc16_py(d, 0, len(d)), v["crc"], "crc16_py " + v["data"][:16])


def test_cobs_vectors():
    # framing's encoder (native where _viper loads) and its bytecode twin, the decoder, the twins'
    # encode and decode (the tests' conveniences)
    from leadwire import _twins, framing

    for v in load("cobs.json"):
        raw = h(v["raw"])
        enc = h(v["encoded"])
        for fn in (framing.encode_into, _twins.encode_into):
            for d in (0, 3):  # at the start of dst, and after 3 bytes it keeps
                out = bytearray(b"\xaa" * (framing.max_encoded(len(raw)) + 1 + d))
                end = fn(raw, len(raw), out, d)
                out[end] = 0
                eq(bytes(out[: end + 1]), b"\xaa" * d + enc, "cobs encode at %d " % d + v["raw"][:16])
        buf = bytearray(enc[:-1])
        m = _twins.decode_in_place(buf, len(buf))
        eq(bytes(buf[:m]), raw, "cobs decode " + v["raw"][:16])
        eq(_twins.encode(raw), enc, "_twins.encode")
        eq(_twins.decode(enc[:-1]), raw, "_twins.decode")


def test_frame_vectors():
    from leadwire import codec

    for v in load("frames.json"):
        f = codec.Frame(
            v["type"],
            v["seq"],
            h(v["payload"]),
            v["channel"],
            v["priority"],
            v["flags"],
            v["message_id"],
            v["index"],
        )
        enc = h(v["encoded"])
        eq(codec.encode(f), enc, "encode type %d" % v["type"])
        eq(codec.decode(enc), f, "decode type %d" % v["type"])


def test_bad_frame_vectors():
    from leadwire import codec

    for v in load("bad_frames.json"):
        d = h(v["data"])
        eq(wire.check(d, len(d)), v["code"], "check " + v["name"])
        try:
            codec.decode(d)
            raise AssertionError("decode accepted " + v["name"])
        except wire.WireError as e:
            eq(e.code, v["code"], "decode code " + v["name"])


def test_auth_vectors():
    # HMAC tags against the standard library's, then a signed session replayed through both ends:
    # every frame an end signs comes out byte for byte as on CPython, every check gives its code
    from leadwire import auth, auth_host

    for v in load("auth.json"):
        if v["kind"] == "tag":
            d = h(v["data"])
            eq(auth.Key(h(v["key"])).tag(h(v["ctx"]), d, len(d))[:6], h(v["tag"]), "tag")
            continue
        ehi = v["epoch"] >> 16
        elo = v["epoch"] & 0xFFFF
        key = h(v["key"])
        dev = auth.Endpoint(key, auth.TO_HOST)
        host = auth_host.HostEndpoint(key)
        for s in v["steps"]:
            f = h(s["frame"])
            n = len(f)
            if "sign" in s:
                # the frame unsigned (flag off, trailer off, CRC again), signed here
                b = bytearray(n)
                b[: n - 10] = f[: n - 10]
                b[1] &= 0xDF
                m = wire.seal(b, n - 20)
                how = s["sign"]
                if how == "hello_req":
                    m = host.host_sign_hello(b, m)
                elif how == "dev_hello":
                    m = dev.device_sign_hello(b, m, ehi, elo)
                else:
                    m = (host if s["to"] == "device" else dev).sign_into(b, m)
                eq(bytes(b[:m]), f, "signed: " + s["what"])
            b = bytearray(f)
            if s["to"] == "device":
                c = dev.device_hello(b, n, ehi, elo) if b[0] & 0x1F == wire.HELLO else dev.verify(b, n)
            else:
                c = host.host_hello(b, n) if b[0] & 0x1F == wire.HELLO else host.verify(b, n)
            eq(c, s["code"], s["what"])
        eq((dev.forged, dev.replayed, dev.unsigned), (2, 2, 1), "device counts")
        eq((host.forged, host.replayed, host.unsigned), (1, 3, 0), "host counts")
        for ep in (dev, host):
            for x in (ep.hi, ep.lo, ep.send_hi, ep.send_lo, ep.k_hi, ep.k_lo, ep.seen):
                if not 0 <= x < (1 << 17):
                    raise AssertionError("auth state holds a large int %d" % x)


def test_ring_vectors():
    from leadwire.ring import EventRing

    for sc in load("ring.json"):
        r = EventRing(sc["capacity"], sc["start"], sc["slot_size"])
        for a in sc["appends"]:
            d = h(a["data"])
            r.write(d, a["channel"], len(d))
        buf = bytearray(wire.OVERHEAD + 2047)
        for p in sc["polls"]:
            n = p["n"]
            size = r.answer_into(buf, n >> 16, n & 0xFFFF, p["max_events"], p["max_bytes"])
            eq(hexlify(buf[:size]).decode(), p["answer"], "%s poll %d" % (sc["name"], n))


def test_ring_burst_vectors():
    # EventRing.respond on the vector's POLL (the firmware's answer: max_frames, follow, the burst
    # loop), each frame as it is handed over
    from leadwire.ring import EventRing

    buf = bytearray(wire.OVERHEAD + 2047)
    got = []

    def keep(L, b, m, a):
        got.append(hexlify(b[:m]).decode())
        return 0

    for v in load("ring_bursts.json"):
        r = EventRing(v["capacity"], v["start"], v["slot_size"])
        for a in v["appends"]:
            d = h(a["data"])
            r.write(d, a["channel"], len(d))
        p = h(v["poll"])
        eq(p[14], v["max_frames"] | (0x80 if v["follow"] else 0), "%s poll's max_frames byte" % v["name"])
        del got[:]
        eq(r.respond(p, len(p), buf, 2047, keep, None, None), 0, "%s dropped" % v["name"])
        eq(got, v["answers"], "%s burst %d follow %s" % (v["name"], v["n"], v["follow"]))
    bad = bytearray(p)  # the last vector's POLL
    for k in (0, 33, 0x80):  # max_frames 0, above 32, 0 with follow: refused, nothing sent
        bad[14] = k
        del got[:]
        eq((r.respond(bad, len(bad), buf, 2047, keep, None, None), got), (-1, []), "max_frames %d" % k)


def test_lead_vectors():
    from leadwire.lead import LeadTracker

    for v in load("lead.json"):
        t = LeadTracker()
        eq([t.lead("s", 0, s) for s in v["arrivals"]], v["leads"], v["name"])


def test_frame_queue_vectors():
    from leadwire import frames, reassembly

    for v in load("frame_queue.json"):
        q = frames.FrameQueue(v["frame_size"])
        names = {}
        for op in v["ops"]:
            if op[0] == "post":
                names[q.post(op[2].encode(), op[3])] = op[1]
            else:
                q.close(op[1])
        sent = []
        r = reassembly.Reassembler()
        while True:
            f = q.pop()
            if f is None:
                break
            r.feed(f)
            sent.append("CLOSE" if f.is_close else "%s%d" % (names[f.message_id], f.index + 1))
        eq(sent, v["sent"], v["name"])


def test_report_sequence():
    from leadwire.reports import ReportSequence

    s = ReportSequence()
    s.begin()
    eq(s.number, 1, "first number")
    rep = s.hold(b"r1")
    eq(s.timeout(), rep, "identical resend")
    eq(s.confirm(503), False, "fault")
    eq(s.number, 1, "fault keeps number")
    s.hold(b"r1-smaller")
    eq(s.confirm(200), True, "success")
    eq(s.number, 2, "success +1")


def test_stream_decoder_resync():
    from leadwire import _twins, codec, framing

    d = framing.StreamDecoder()
    good = _twins.encode(codec.encode(codec.Frame(wire.NO_EVENT, 42)))
    data = b"\x13\x37garbage\x00" + good + good[:4] + b"\x00" + good
    pos = 0
    got = []
    while pos < len(data):
        pos = d.scan(data, pos, len(data))
        if d.ready:
            got.append(d.ready)
    eq(len([g for g in got if g > 0]), 2, "two good frames")
    eq(len([g for g in got if g < 0]), 2, "two errors")


def test_poll_client_overrun_accounting():
    from leadwire import client, codec, messages
    from leadwire.ring import EventRing

    ring = EventRing(4, 0xFFFFFFFE, 4, 7)
    buf = bytearray(128)

    def answer(req):
        if req.type == wire.HELLO:
            return messages.hello_frame(messages.Hello(7, 4, 4, 128, 1, "d", "t", "unix"), req.message_id)
        n = req.seq
        size = ring.answer_into(buf, n >> 16, n & 0xFFFF, 8, 100, req.message_id)
        return codec.decode(bytes(buf[:size]))

    cl = client.PollClient()
    for _ in range(2):
        ring.write(b"ab", 1, 2)
    for _ in range(3):  # HELLO, first contact RECOVERY, EVENTS
        cl.on_frame(answer(cl.next_request()))
    eq((cl.n, cl.received), (0xFFFFFFFF, 2), "first contact")
    for _ in range(11):
        ring.write(b"cd", 2, 2)
    for _ in range(2):  # RECOVERY (same epoch: overrun), EVENTS
        cl.on_frame(answer(cl.next_request()))
    eq((cl.loss.cause, cl.lost, cl.received, cl.n), ("overrun", 7, 6, 10), "overrun counted exactly")


def test_poll_client_pipelined_burst():
    # a pipelined POLL from the predicted end of a burst, then the rest of the burst and its answer
    # (the ring's module first: on the 64 KB heap the client's blocks then fit beside it)
    from leadwire.ring import EventRing

    # isort: split
    from leadwire import client, codec, messages

    ring = EventRing(16, 0xFFFFFFFE, 4, 7)
    buf = bytearray(128)

    def burst(req):
        if req.type == wire.HELLO:
            return [messages.hello_frame(messages.Hello(7, 16, 4, 128, 1, "d", "t", "unix"), req.message_id)]
        hi, lo = req.seq >> 16, req.seq & 0xFFFF
        out = []
        for i in range(messages.poll_frames(req)):
            size = ring.answer_into(buf, hi, lo, 2, 100, req.message_id, i)
            out.append(codec.decode(bytes(buf[:size])))
            if out[-1].type != wire.EVENTS or not ring._st[10]:
                break
            hi, lo = ring._st[8], ring._st[9]
        return out

    cl = client.PollClient()
    cl.pipeline = True
    ring.write(b"ab", 1, 2)
    for _ in range(3):  # HELLO, first contact RECOVERY, EVENTS
        for f in burst(cl.next_request(2, 100, 8)):
            cl.on_frame(f)
    eq((cl.n, cl.received), (0xFFFFFFFE, 1), "first contact")
    for _ in range(9):
        ring.write(b"cd", 2, 2)
    frames = burst(cl.next_request(2, 100, 8))
    eq(len(frames), 5, "a burst of 5 frames of 2")
    cl.on_frame(frames[0])
    eq((cl.burst_done, cl.ahead), (True, 7), "frame 0 predicts the end: n + backlog")
    req = cl.next_request(2, 100, 8)
    eq((req.seq, cl.n, cl.pipelined), (7, 0, 1), "the pipelined POLL asks from the prediction")
    ring.write(b"ef", 3, 2)
    got = 0
    for f in frames[1:] + burst(req):
        kind, evs = cl.on_frame(f)
        eq(kind, client.EVENTS, "every frame goes on from n")
        got += len(evs)
    eq((got, cl.received, cl.n, cl.lost, cl.mispredicted), (8, 11, 8, 0, 0), "all received once")


# -- allocation: 0 bytes on the device hot path ---------------------------------------------


def _steady(fn, rounds):
    # Net heap growth over `rounds` calls with the collector off (catches garbage), then the same
    # under heap_lock (catches any allocation, even one freed at once).
    fn()
    gc.collect()
    gc.disable()
    before = gc.mem_alloc()
    for _ in range(rounds):
        fn()
    grown = gc.mem_alloc() - before
    gc.enable()
    if grown:
        raise AssertionError("heap grew %d bytes over %d calls" % (grown, rounds))
    if micropython is not None and hasattr(micropython, "heap_lock"):
        micropython.heap_lock()
        try:
            for _ in range(rounds):
                fn()
        except MemoryError:
            micropython.heap_unlock()
            raise AssertionError("allocated under heap_lock")
        micropython.heap_unlock()


class _Poller:
    # What the agent does per event and what the host does per poll, as bound-method calls.
    def __init__(self, capacity, slot, frame, start=0xFFFFFF00):
        from leadwire.ring import EventRing

        self.ring = EventRing(capacity, start, slot)
        self.payload = bytearray(slot)
        self.buf = bytearray(frame)
        self.hi = 0
        self.lo = 0
        self.got = 0

    def write(self):
        self.payload[0] = (self.payload[0] + 1) & 0xFF
        self.ring.write(self.payload, 1, len(self.payload))

    def answer(self):
        self.ring.answer_into(self.buf, self.hi, self.lo, 20, 1400)
        b = self.buf
        if b[0] & 0x1F == wire.EVENTS:
            # the host's new offset is the last one in the batch: first + count - 1, on halves
            k = b[10]
            self.got += k
            lo = ((b[8] << 8) | b[9]) + k - 1
            hi = (b[6] << 8) | b[7]
            if lo > 0xFFFF:
                lo -= 0x10000
                hi = (hi + 1) & 0xFFFF
            self.hi = hi
            self.lo = lo


def test_alloc_ring_write():
    p = _Poller(256, 64, 1412)
    _steady(p.write, 2000)


def test_alloc_answer_into():
    # offsets cross 2^30 (the small-int limit of 32-bit ports), 2^31 and the 2^32 wrap with
    # heap_lock held: 300 + 2 * 501 events before it, the 100th event under it is the first past
    for top in (0x40000000, 0x80000000, 0x100000000):
        start = (top - 1400) & 0xFFFFFFFF
        p = _Poller(256, 64, 1412, start)
        for _ in range(300):
            p.write()
        # start 40 events behind the newest
        p.hi = p.ring._st[1]
        p.lo = p.ring._st[2] - 40
        if p.lo < 0:
            p.lo += 0x10000
            p.hi = (p.hi - 1) & 0xFFFF

        def step():
            p.write()
            p.write()
            p.answer()

        _steady(step, 500)
        # every event written after the start point arrived once, in order: 40 + 2 per step
        # (1 warm-up + 500 counted + 500 under heap_lock)
        eq(p.got, 40 + 2 * 1001, "events received")
        eq((p.hi, p.lo), (p.ring._st[1], p.ring._st[2]), "host caught up")
        eq((p.hi << 16) | p.lo, (start + 2301) & 0xFFFFFFFF, "host offset past %x" % top)
        p = step = None  # the ring's 17 KB go before the next one is made
        gc.collect()


def test_alloc_burst_answer():
    # one POLL answered with up to 4 frames of 20 events, going on from the last offset carried
    p = _Poller(256, 64, 1412)
    ring = p.ring
    buf = p.buf
    for _ in range(100):
        p.write()
    st = [ring._st[1], (ring._st[2] - 80) & 0xFFFF, 0]  # the host is 80 events behind (no wrap here)

    def step():
        for _ in range(80):
            p.write()
        hi = st[0]
        lo = st[1]
        for i in range(4):
            ring.answer_into(buf, hi, lo, 20, 1400, 9, i)
            st[2] += buf[10]
            hi = ring._st[8]
            lo = ring._st[9]
            if not ring._st[10]:
                break
        st[0] = hi
        st[1] = lo

    _steady(step, 200)
    eq(st[2], 80 * 401, "events carried by bursts")
    eq((st[0], st[1]), (ring._st[1], (ring._st[2] - 80) & 0xFFFF), "still 80 behind, as at the start")


def test_alloc_recovery_going_on():
    # an overrun answered RECOVERY with follow (the burst goes on from n0 - 1: last_hi/last_lo and
    # backlog set on halves), then EVENTS from n0, across the 16-bit half: 0 bytes
    p = _Poller(16, 64, 1412, 0x3FFFFFF0)
    ring = p.ring
    buf = p.buf
    st = [0, 0]

    def step():
        for _ in range(40):
            p.write()  # the host's 0, 0 is far behind: every poll is a RECOVERY
        hi = 0
        lo = 0
        for i in range(4):
            ring.answer_into(buf, hi, lo, 20, 1400, 9, i, i + 1 < 4)
            if buf[0] & 0x1F == 3:
                st[0] += buf[10]
            hi = ring._st[8]
            lo = ring._st[9]
            if not ring._st[10]:
                break
        st[1] += 1

    _steady(step, 200)
    eq(st[0], 16 * 401, "events carried after the RECOVERYs")


def test_write_samples_equals_writes():
    # the native batch write (the sensor's samples) against one bytecode write() per event: the
    # same store bytes and offsets, across the slot wrap, the 2^16 half and an overrun
    from leadwire.ring import EventRing

    a = EventRing(7, 0xFFFEFFF0, 6)
    b = EventRing(7, 0xFFFEFFF0, 6)
    data = bytearray(b"..wxyz")
    number = 0xFFF0
    for count in (3, 5, 0, 1, 7, 6, 2):
        a.write_samples(b"..wxyz", 1, 5, count, number)
        for _ in range(count):
            data[0] = number >> 8
            data[1] = number & 0xFF
            b.write(data, 1, 5)
            number = (number + 1) & 0xFFFF
        eq(
            (a._store, a._st[0], a._st[1], a._st[2], a._st[3], a._st[4]),
            (b._store, b._st[0], b._st[1], b._st[2], b._st[3], b._st[4]),
            "ring after %d" % count,
        )
    ba = bytearray(100)
    bb = bytearray(100)
    for back in range(1, 8):
        lo = a._st[2] - back
        eq(a.answer_into(ba, a._st[1], lo, 255, 80), b.answer_into(bb, b._st[1], lo, 255, 80), "size")
        eq(ba, bb, "answer %d back" % back)


def test_write_equals_bytecode_twin():
    # EventRing.write and write_samples as loaded against the bytecode twins (twin_checks.write)
    import twin_checks

    twin_checks.write(eq)


def test_answer_equals_bytecode_twin():
    # EventRing.answer_cobs as loaded against the bytecode (twin_checks.answer)
    import twin_checks

    twin_checks.answer(eq)


def test_alloc_write_samples():
    from leadwire.ring import EventRing

    r = EventRing(256, 0xFFFFFF00, 64)
    payload = bytearray(64)
    n = [0]

    def step():
        r.write_samples(payload, 1, 64, 200, n[0])
        n[0] = (n[0] + 200) & 0xFFFF

    _steady(step, 300)


def test_alloc_answer_recovery_and_no_event():
    p = _Poller(16, 8, 256)
    for _ in range(40):
        p.write()
    r = p.ring
    buf = p.buf

    def step():
        r.answer_into(buf, 0, 0, 20, 200)  # far away: RECOVERY
        r.answer_into(buf, r._st[1], r._st[2], 20, 200)  # newest: NO_EVENT

    _steady(step, 500)


def test_alloc_respond():
    # a burst POLL answered by EventRing.respond (4 frames of 5 events): 0 bytes but the sender's
    from leadwire import codec, messages

    p = _Poller(16, 8, 256)
    for _ in range(40):
        p.write()
    r = p.ring
    n = (r._st[1] << 16 | r._st[2]) - 30
    req = codec.encode(messages.poll_frame(n, 5, 200, 1, 4))
    buf = p.buf
    sent = bytearray(1)

    def d(L, b, m, a):
        sent[0] += 1
        return 0

    L = [bytearray(300)]  # a link whose slot 0 holds its COBS buffer

    def step():
        r.respond(req, len(req), buf, 200, d, None, None)
        r.respond(req, len(req), buf, 200, d, L, None, 0)  # COBS-framed (a serial link)

    _steady(step, 200)


def test_alloc_device_respond():
    # device.respond (native where _viper loads) on a serial link without auth: a burst POLL of
    # 4 frames of 5 events, NO_EVENT, RECOVERY (and its follow), the copy of the POLL answered
    # last: 0 bytes but the sender's
    from leadwire import codec, device, framing, messages

    p = _Poller(16, 8, 256)
    for _ in range(40):
        p.write()
    r = p.ring
    top = r._st[1] << 16 | r._st[2]
    reqs = [
        codec.encode(messages.poll_frame(n, 5, 200, t, 4, f))
        for t, n, f in ((1, top - 30, 0), (2, top, 0), (3, top - 100, 1), (4, top - 100, 0))
    ]
    sent = bytearray(1)

    def d(L, b, m, a):
        sent[0] += 1
        return 0

    L = [None] * 18  # a serial link's record: tx 2, COBS buffer 13, budget 16, last POLL 17
    L[2] = p.buf
    L[13] = bytearray(framing.max_encoded(len(p.buf)) + 1)
    L[16] = 200
    L[17] = -1

    def step():
        for q in reqs:
            device.respond(L, q, len(q), None, r, d)
        device.respond(L, q, len(q), None, r, d)  # the copy: not answered

    _steady(step, 100)


def test_alloc_wire_check_and_crc():
    from leadwire import codec

    buf = bytearray(codec.encode(codec.Frame(wire.EVENTS, 9, bytes(1000))))
    n = len(buf)

    def step():
        if wire.check(buf, n):
            raise AssertionError("check failed")

    _steady(step, 200)


def test_alloc_stream_decoder():
    from leadwire import _twins, codec, framing

    d = framing.StreamDecoder(1412)
    data = _twins.encode(codec.encode(codec.Frame(wire.POLL, 77, b"\x00\x14\x05\x78")))

    def step():
        pos = 0
        end = len(data)
        while pos < end:
            pos = d.scan(data, pos, end)

    _steady(step, 500)
    eq(d.ready, len(data) - 2, "decoded frame length")


def test_alloc_cobs_encode():
    from leadwire import framing

    src = bytearray(b"\x00\x01\x02" * 100)
    dst = bytearray(framing.max_encoded(len(src)) + 1)

    def step():
        framing.encode_into(src, len(src), dst, 0)

    _steady(step, 200)


def test_alloc_copy():
    from leadwire.bufcopy import copy_into, copy_py

    a = bytearray(64)
    b = bytearray(b"x" * 64)

    def step():
        copy_into(a, 0, b, 0, 64)
        copy_py(a, 0, b, 0, 64)

    _steady(step, 500)


# -- 32-bit small ints: offsets never become ints >= 2^30 on the hot path -------------------


def test_offsets_stay_small_across_wrap():
    from leadwire import codec
    from leadwire.ring import EventRing

    r = EventRing(8, 0xFFFFFFFA, 4)
    buf = bytearray(64)
    for _ in range(12):
        r.write(b"ab", 0, 2)
        for v in (r._st[1], r._st[2], r._st[7], r._st[3]):
            if not -(1 << 17) < v < (1 << 17):
                raise AssertionError("ring state holds a large int %d" % v)
    eq(r.newest(), 5, "wrapped newest")
    size = r.answer_into(buf, 0xFFFF, 0xFFFF, 4, 64)  # n = 2^32-1 -> first event is offset 0
    eq(codec.decode(bytes(buf[:size])).seq, 0, "s(2^32-1) = 0")


def test_responder_vectors():
    # device.respond, the device's answering rules, on one link: each frame's result and the
    # frames sent (signed with auth, as the firmware's _send signs), then the endpoint's rejects;
    # where _viper loads, respond is native (_viper.respond: a POLL on a serial link without auth)
    # and its bytecode twin device.slow runs the same vectors
    from leadwire import _twins, auth, device, framing
    from leadwire.ring import EventRing

    # auth off, a second time as a serial link: its COBS buffer at 13, where the ring builds each
    # answer COBS-encoded and 0-terminated (EventRing.answer_cobs: native where _viper loads)
    runs = [(v, c) for v in load("responder.json") for c in ((0, 1) if v["key"] is None else (0,))]
    fns = [device.respond] + ([device.slow] if device.slow is not device.respond else [])
    for v, c, respond in [(v, c, fn) for v, c in runs for fn in fns]:
        r = EventRing(v["capacity"], v["start"], v["slot_size"], v["epoch"])
        for a in v["appends"]:
            d = h(a["data"])
            r.write(d, a["channel"], len(d))
        e = v["epoch"]
        k = 0 if v["key"] is None else wire.AUTH_SIZE
        L = [None] * 18  # a link record (lwboot.link's): tx 2, HELLO 11, COBS 13, auth 15, budget 16, last 17
        L[2] = bytearray(v["frame"] + k)
        if c:
            L[13] = bytearray(framing.max_encoded(v["frame"]) + 1)
        L[11] = h(v["hello"])
        L[16] = v["frame"] - wire.OVERHEAD - k
        L[17] = -1
        ep = None
        if k:
            ep = auth.Endpoint(h(v["key"]), auth.TO_HOST)
            L[15] = [ep.verify, ep.sign_into, ep.device_hello, ep.device_sign_hello, None, e >> 16,
                     e & 0xFFFF, ep, lambda: 0 if ep.live else 1]  # fmt: skip
        got = []

        def d(L, b, n, a):
            A = L[15]
            if b is L[13]:  # built COBS-framed: exactly one frame, its delimiter last
                b = bytes(b[:n])
                eq((b.find(b"\x00"), n > 1), (n - 1, True), "one COBS frame, its delimiter last")
                b = _twins.decode(b[: n - 1])
                n = len(b)
            elif A is not None and not b[1] & 0x20:
                n = A[1](b, n)
            got.append(hexlify(b[:n]).decode())
            return 0

        for s in v["steps"]:
            f = h(s["frame"])
            del got[:]
            eq(respond(L, f, len(f), None, r, d), s["result"], "%s: %s" % (v["name"], s["what"]))
            eq(got, s["answers"], "%s: %s: answers" % (v["name"], s["what"]))
        if ep is not None:
            eq([ep.forged, ep.replayed, ep.unsigned], v["rejects"], v["name"] + " rejects")


def test_scan_vectors():
    # framing.scan (native where _viper loads: the whole receive path in one call) and its bytecode
    # twin scan_py on the same streams, fed whole and in pieces: every frame of
    # frames.json COBS-framed comes out whole (ready = its length), every bad_frames.json frame as
    # minus its code, a bad COBS run as E_COBS, an overlong frame as E_OVERSIZE
    from array import array

    from leadwire import _twins, framing

    enc = bytearray(3 + framing.max_encoded(wire.OVERHEAD + 2047))  # (the largest block, made first)
    size = framing.max_encoded(1024)  # (a decoder for 1 KB frames: the 2 KB one is oversize)
    b = bytearray(size)
    st = array("i", (0, 0, 0, size, 0))
    got = []

    def run(data, ready, f):
        for fn in (framing.scan, _twins.scan_py):
            for piece in (1, 7, 64, 5000):
                del got[:]
                p = 0
                while p < len(data):
                    e = min(p + piece, len(data))
                    q = p
                    while q < e:
                        st[4] = e
                        q = fn(data, q, b, st)
                        if st[2]:
                            got.append(st[2])
                            if st[2] > 0 and b[: st[2]] != f:
                                raise AssertionError("frame %s" % hexlify(data[:12]))
                    p = e
                eq(got, [ready], "piece %d: %s" % (piece, hexlify(data[:12])))
                eq((st[0], st[1]), (0, 0), "state after a frame")

    for v in load("frames.json"):
        f = h(v["encoded"])
        n = _twins.encode_into(f, len(f), enc, 2)  # delimiters first: empty frames, skipped
        enc[n] = 0
        data = memoryview(enc)[: n + 1]
        run(data, len(f) if n - 2 <= size else -wire.E_OVERSIZE, f)
        data = v = f = None
    for v in load("bad_frames.json"):
        run(_twins.encode(h(v["data"])), -v["code"], None)
    run(b"\x05\x01\x00", -wire.E_COBS, None)
    run(b"\x07" * (size + 9) + b"\x00", -wire.E_OVERSIZE, None)


def main():
    names = [k for k in sorted(globals()) if k.startswith("test_")]
    if len(sys.argv) > 2:
        names = sys.argv[2:]
    # the checks not run give their bytecode back (~9 KB for all of them: a lot of a 64 KB heap)
    g = globals()
    for k in [k for k in g if k.startswith("test_") and k not in names]:
        del g[k]
    passed = failed = 0
    for name in names:
        gc.collect()
        try:
            globals()[name]()
            print("ok", name)
            passed += 1
        except Exception as e:  # report and go on: one line per check
            print("FAIL %s: %s %s" % (name, type(e).__name__, e))
            failed += 1
    print("%d passed, %d failed" % (passed, failed))
    return failed


if __name__ == "__main__":
    sys.exit(1 if main() else 0)
