# The native code's checks against its bytecode twins, for core_runner (test_write_equals_bytecode_twin,
# test_answer_equals_bytecode_twin): a module of its own, imported only by those checks, so that
# their code is not on the 64 KB heap while the others run.
import gc

from leadwire import wire


def write(eq):
    # EventRing.write and write_samples as loaded (native where _viper loads) against the bytecode
    # twins (_twins.write, write_samples) on the same calls: every store byte and state slot,
    # for payloads word-aligned and not (the native copy goes by words only when both are),
    # single events and batches, across the slot wrap, the 2^16 half and overruns
    from leadwire import _twins as ring
    from leadwire.ring import EventRing

    raw = bytearray(range(0x30, 0x30 + 80))
    x = 12345
    for cap, slot in ((7, 6), (5, 13), (3, 64), (1, 2), (9, 16)):
        a = EventRing(cap, 0xFFFEFFF0, slot)
        b = EventRing(cap, 0xFFFEFFF0, slot)
        for step in range(60):
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF
            off = x % 4
            m = 2 + (x >> 3) % (slot - 1)
            k = (x >> 9) % (cap + 1)
            num = -1 if (x >> 14) & 1 else (x >> 15) & 0xFFFF
            d = memoryview(raw)[off : off + m] if off else raw
            if (x >> 13) & 1:
                a.write(d, step & 0xFF, m)
                ring.write(b, d, step & 0xFF, m)
            else:
                a.write_samples(d, step & 0xFF, m, k, num)
                ring.write_samples(b, d, step & 0xFF, m, k, num)
            # (the state less slots 14 and 15: each ring's store address, native only)
            eq((a._store, a._st[:14]), (b._store, b._st[:14]), "ring %dx%d step %d" % (cap, slot, step))
        for w in (a.write, b):
            for ch, m in ((1, slot + 1), (256, 2), (1, 2048 + 2)):  # above the slot; channel, length
                try:
                    if w is b:
                        ring.write(b, raw, ch, m)
                    else:
                        w(raw, ch, m)
                    raise AssertionError("took channel %d length %d" % (ch, m))
                except ValueError:
                    pass
        eq((a._store, a._st[:14]), (b._store, b._st[:14]), "ring %dx%d: nothing taken" % (cap, slot))
        a = b = w = None
        gc.collect()


def answer(eq):
    # EventRing.answer_cobs as loaded (an EVENTS answer in one native pass where _viper loads)
    # against the bytecode (ring.answer None: answer_into's three steps, then framing.encode_into)
    # on the same rings and polls: the COBS bytes and the burst's state, for EVENTS (wrapped slots,
    # the 2^16 half and 2^32 wraps, max_events and max_bytes cut-offs, a small buf), NO_EVENT,
    # RECOVERY with and without follow, runs of 254 non-zero bytes (one ending at the frame's last
    # byte) and zero bytes
    from leadwire import framing, ring
    from leadwire.ring import EventRing

    native = ring.answer
    room = (wire.OVERHEAD + 2047, wire.OVERHEAD + 300)
    bufs = [bytearray(n) for n in room + room]
    cbs = [bytearray(framing.max_encoded(n) + 1) for n in room + room]
    x = 4242
    try:
        for cap, slot, start in ((7, 6, 0xFFFEFFF0), (16, 64, 0xFFFFFFF8), (9, 251, 0x3FFFFFF0), (3, 2, 5)):
            r = EventRing(cap, start, slot, 0x12345678)
            data = bytearray(slot)
            for step in range(24):
                x = (x * 1103515245 + 12345) & 0x7FFFFFFF
                for i in range(x % (cap + 3)):
                    m = slot if slot == 251 else 2 + (x >> (i % 7)) % (slot - 1)
                    for j in range(m):
                        data[j] = (
                            0x5A + step if slot == 251 else ((x >> (j % 11)) + i * j) & (0xFF if j % 5 else 0)
                        )
                    r.write(data, (x >> 3) & 0xFF, m)
                newest = (r._st[1] << 16) | r._st[2]
                for back in (0, 1, 2, r._st[3] - 1, r._st[3], r._st[3] + 1, 0x12345):
                    x = (x * 1103515245 + 12345) & 0x7FFFFFFF
                    n = (newest - back) & 0xFFFFFFFF
                    me = (1, 3, 255, 300)[x % 4]
                    mb = (2047, 80, 0, 700)[(x >> 2) % 4]
                    tag = (x >> 4) & 0xFF
                    index = (x >> 12) % 32
                    follow = (x >> 17) & 1
                    r_ = (x >> 18) & 1
                    got = []
                    for impl in (native, None):
                        ring.answer = impl
                        b = bufs[r_ + 2 * (impl is None)]
                        c = cbs[r_ + 2 * (impl is None)]
                        k = r.answer_into(b, n >> 16, n & 0xFFFF, me, mb, tag, index, follow)
                        st = r._st[7:11]
                        e = r.answer_cobs(b, c, n >> 16, n & 0xFFFF, me, mb, tag, index, follow)
                        got.append((bytes(b[:k]), list(st), bytes(c[:e]), r._st[7:11]))
                        ring.answer = native
                    eq(got[0], got[1], "ring %dx%d step %d back %d" % (cap, slot, step, back))
                    if slot == 251 and back == 1 and got[1][2][-2:] == b"\xff\x00":
                        x |= 0x40000000  # the run of 254 ended the frame: seen at least once
            r = None
            gc.collect()
        eq(x >> 30, 1, "a frame ending a run of 254")
    finally:
        ring.answer = native
