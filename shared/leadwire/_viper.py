# Native-code versions of the byte loops on the device hot path (CRC, copy, the ring's write).
# Imported only on MicroPython; ports without a native emitter fail to compile this module
# and the callers fall back to bytecode loops. Viper frames live on the C stack: 0 heap bytes.
import micropython


@micropython.viper
def crc16_viper(buf: ptr8, start: int, end: int, table: ptr16) -> int:  # noqa: F821
    crc = 0xFFFF
    i = start
    while i < end:
        crc = ((crc << 8) & 0xFFFF) ^ table[((crc >> 8) ^ buf[i]) & 0xFF]
        i += 1
    return crc


@micropython.viper
def copy_viper(dst: ptr8, dpos: int, src: ptr8, spos: int, n: int):  # noqa: F821
    i = 0
    while i < n:
        dst[dpos + i] = src[spos + i]
        i += 1


# The ring's write: EventRing.write itself, write_samples through it (_twins' write and
# write_samples are the bytecode twins and say what they do; the state's slots are ring.py's _S*
# numbers: 13 the slot size, 14 and 15 the store's address, which the first write puts there: the
# bytearray never moves, and the ring holds it; 16 where a record starts in its slot). A method call finds only the state by attribute:
# ~400 cycles each on an RP2040. Every name a board loads is a qstr that stays, so they reuse names the core already has.
# Viper keeps its first three locals (the arguments first) in registers on Thumb, and there a
# ptr16/ptr32 subscript by a register local shifts that local in place (v1.26.1): such subscripts
# below take an expression or a constant.


@micropython.viper
def write(self, d: ptr8, channel: int, m: int):  # noqa: F821
    # m >= 0: one event, payload[:m]; m < 0: write_samples's call, -1 - m its length, and above
    # the length's 11 bits its start + 1, and above the channel's 8 bits its count - 1
    st = ptr32(self._st)
    k = 1
    b = -1
    if m < 0:
        m = -1 - m
        k = (channel >> 8) + 1
        b = (m >> 11) - 1
        m &= 0x7FF
    elif channel > 0xFF:
        m = 0x7FF
    if m > st[13]:
        raise self.TOO_LARGE  # (a global here would cost every call a globals swap)
    c = st[5]
    h = st[0] + 1  # the slot of the first
    if h == c:
        h = 0
    x = h + k - 1  # the newest's
    if x >= c:
        x -= c
    st[0] = x
    x = st[2] + k
    if x > 0xFFFF:
        x -= 0x10000
        st[1] = (st[1] + 1) & 0xFFFF
    st[2] = x
    x = st[3] + k
    if x <= c:
        st[3] = x
    else:  # x - c pushed out
        st[3] = c
        x -= c
        if st[4] < 0x3FFFFFFF - x:
            st[4] = st[4] + x
        else:
            st[4] = 0x3FFFFFFF
    e = st[14] | ((st[15] << 16) << 16)  # the store's address, kept by the first write
    if e == 0:
        e = int(ptr8(self._store))
        st[14] = e
        st[15] = (e >> 16) >> 16  # 0 on 32-bit ports (each shift below the word size)
    e += st[16] - 1  # the records start 1 byte into a slot (0: into the slot before)
    x = channel & 0xFF
    while k > 0:
        a = e + h * st[6]  # the record at a + 1, its data at a + 4
        s = ptr8(a)
        s[1] = x
        s[2] = m >> 8
        s[3] = m
        channel = m  # bytes left, copied from the end
        if ((a + 4) | int(d)) & 3 == 0:  # word copies, 16 bytes a turn
            while channel & 15 != 0:
                channel -= 1
                s[4 + channel] = d[channel]
            while channel > 0:
                channel -= 16
                g = ptr32(a + channel)
                p = ptr32(int(d) + channel)
                g[1] = p[0]
                g[2] = p[1]
                g[3] = p[2]
                g[4] = p[3]
        while channel > 0:
            channel -= 1
            s[4 + channel] = d[channel]
        if b >= 0:
            s[4] = b >> 8
            s[5] = b
            b = (b + 1) & 0xFFFF
        h += 1
        if h == c:
            h = 0
        k -= 1


# The ring's EVENTS answer, COBS-encoded (EventRing.answer_cobs and respond; answer_into's bytecode
# is the reference and says what the frame holds): when the poll is spec 004's case 1 (EventRing.
# _classify's EVENT: newest - n mod 2^32 in 1..count, left in st[7]), the header, then the records
# read in the store, go through the CRC and the COBS encoder in one pass (frame, below), the CRC
# bytes after them, then the delimiter; returns the size in cb (buf holds the header and the CRC
# only), else -1 with nothing written (the caller answers in bytecode). q, crc, o: the poll's hi,
# lo and tag. t: crc16.TABLE; k max_events, m max_bytes, index the frame's in its burst, n len(buf).


@micropython.viper
def answer(q: int, crc: int, o: int, st: ptr32, buf: ptr8, cb: ptr8, t: ptr16, k: int, m: int, index: int, n: int) -> int:  # noqa: E501, F821
    hi = q
    lo = crc
    x = st[2] - lo  # newest - n, on halves (_classify)
    f = st[1] - hi
    if x < 0:
        x += 0x10000
        f -= 1
    if f & 0xFFFF or x == 0 or x > st[3]:
        return -1  # not EVENT: NO_EVENT, RECOVERY
    st[7] = x
    if n - 12 < m:
        m = n - 12
    if m > 2047:
        m = 2047
    if k > 255:
        k = 255
    a = (st[14] | ((st[15] << 16) << 16)) + st[16]  # the store, from its first record
    w = st[6]
    x -= 1  # events after s(n)
    p = st[0] - x  # the slot of s(n)
    if p < 0:
        p += st[5]
    f = 3  # payload bytes
    j = 0  # records taken
    while x >= 0 and j < k:
        g = a + p * w
        g = 3 + ((ptr8(g)[1] << 8) | ptr8(g)[2])
        if j != 0 and f + g > m:
            break
        f += g
        j += 1
        x -= 1
        p += 1
        if p == st[5]:
            p = 0
    g = lo + j  # the last offset carried: n + taken
    p = hi
    if g > 0xFFFF:
        g -= 0x10000
        p = (hi + 1) & 0xFFFF
    st[8] = p
    st[9] = g
    st[10] = x + 1
    lo += 1  # the first: s(n)
    if lo == 0x10000:
        lo = 0
        hi = (hi + 1) & 0xFFFF
    buf[0] = 0x23  # version 1, EVENTS
    buf[1] = 0x10  # F_LAST
    buf[2] = 0
    buf[3] = o  # the tag
    buf[4] = (index << 3) | (f >> 8)
    buf[5] = f
    buf[6] = hi >> 8
    buf[7] = hi
    buf[8] = lo >> 8
    buf[9] = lo
    buf[10] = j
    buf[11] = (x + 1) >> 8
    buf[12] = x + 1
    return int(frame(int(buf), int(st), int(cb), t))


# The answer's byte loop: buf[:13] (the header answer wrote), then buf[10] records from the store
# (from the slot of s(n): st[0] - st[7] + 1), then the CRC, written at buf[10 + the payload's
# length], go through the CRC-16 (t: crc16.TABLE) and the COBS encoder into cb, then the delimiter;
# returns the size in cb. q, crc, o arrive holding buf's, st's and cb's addresses: the three
# registers, which the byte loop reuses. _thumb.frame is the same in Thumb code (rp2), taken where
# it loads (the module's end): ~23 cycles a byte there against ~95 here on an RP2040.


@micropython.viper
def frame(q: int, crc: int, o: int, t: ptr16) -> int:  # noqa: F821
    st = ptr32(crc)  # noqa: F821
    buf = ptr8(q)  # noqa: F821
    j = buf[10]
    n = 10 + (((buf[4] & 7) << 8) | buf[5])  # where the CRC goes
    w = st[6]
    a = (st[14] | ((st[15] << 16) << 16)) + st[16]  # the store, from its first record
    h = st[0] - st[7] + 1  # the slot of s(n)
    if h < 0:
        h += st[5]
    crc = 0xFFFF
    d = o  # cb
    c = o  # the COBS code byte
    o += 1  # the next byte out
    e = q + 13  # the end of this piece: the header
    b = 0
    while True:
        while q < e:
            b = ptr8(q)[0]
            q += 1
            crc = (crc << 8) ^ t[((crc >> 8) ^ b) & 0xFF]
            if b == 0:
                ptr8(c)[0] = o - c
                c = o
                o += 1
            else:
                ptr8(o)[0] = b
                o += 1
                if o - c == 0xFF:
                    ptr8(c)[0] = 0xFF
                    c = o
                    o += 1
        if j > 0:  # the next record, from the store
            q = a + h * w
            e = q + 3 + ((ptr8(q)[1] << 8) | ptr8(q)[2])
            h += 1
            if h == st[5]:
                h = 0
            j -= 1
        elif n > 0:  # the CRC, after the rest
            buf[n] = crc >> 8
            buf[n + 1] = crc
            q = int(buf) + n
            e = q + 2
            n = 0
        else:
            break
    if b != 0 and o - c == 1:  # the last byte ended a run of 254: no code byte after it
        o -= 1
    else:
        ptr8(c)[0] = o - c
    ptr8(o)[0] = 0
    return o + 1 - d



# COBS encoding of a serial frame (framing says what it does; _twins.encode_into is the bytecode twin;
# same name, so no new qstr). Bytecode costs ~400 cycles per byte on an RP2040: a 1 KB frame was
# most of the poll-to-answer path. Every argument is required here (viper has no defaults).


@micropython.viper
def encode_into(src: ptr8, n: int, dst: ptr8, d: int) -> int:  # noqa: F821
    c = d  # where the current run's code byte goes
    d += 1
    code = 1
    i = 0
    while i < n:
        b = src[i]
        if b == 0:
            dst[c] = code
            c = d
            d += 1
            code = 1
        else:
            dst[d] = b
            d += 1
            code += 1
            if code == 0xFF and i < n - 1:
                dst[c] = code
                c = d
                d += 1
                code = 1
        i += 1
    dst[c] = code
    return d


# -- the serial receive path in one call: framing.scan says what it does; _twins.scan_py is the
# bytecode twin (the same rules: _twins.decode_in_place and wire.check, whose codes are the literals here;
# both checked on the same streams, tests/mpy/core_runner.py test_scan_vectors). In bytecode a
# received byte cost ~5,000 cycles on an RP2040 (a POLL ~100,000); the scan, the COBS decode and
# the check were four calls. Arguments named as the twin's (names a board already has). The CRC
# a byte at a time without the table (_thumb.scan's: x = crc >> 8 ^ byte, x ^= x >> 4, ...).


@micropython.viper
def scan(s: ptr8, h: int, b: ptr8, k: ptr32) -> int:  # noqa: F821
    m = k[0]  # stuffed bytes held
    c = k[3]
    n = k[4]  # the end
    k[2] = 0
    while h < n:
        x = s[h]
        h += 1
        if x:
            if m < c:
                b[m] = x
                m += 1
            else:
                k[1] = 1  # what does not fit is dropped: an oversize frame
            continue
        if m == 0:
            continue  # empty: a delimiter used to resynchronise
        while h < n and s[h] == 0:
            h += 1  # the delimiters after it: empty frames, taken now (a call less)
        k[0] = 0
        r = -8  # E_OVERSIZE
        if k[1] == 0:
            r = 0
            i = 0  # COBS decode in place (_twins.decode_in_place)
            o = 0
            while i < m:
                x = b[i]
                i += 1
                e = i + x - 1
                if e > m:
                    r = -7  # E_COBS
                    break
                while i < e:
                    b[o] = b[i]
                    o += 1
                    i += 1
                if x != 0xFF and i < m:
                    b[o] = 0
                    o += 1
        if r == 0:  # wire.check
            x = b[0]
            e = o - 12
            if b[1] & 0x20:
                e -= 8  # a signed frame: its auth trailer
            if o < 12:
                r = -1  # E_SHORT
            elif (x >> 5) != 1:
                r = -2  # E_VERSION
            elif (x & 0x1F) == 0 or (x & 0x1F) > 10:
                r = -3  # E_TYPE
            elif ((b[4] & 7) << 8) | b[5] != e:
                r = -4  # E_LENGTH
            else:
                x = 0xFFFF
                i = 0
                e = o - 2
                while i < e:
                    c = ((x >> 8) ^ b[i]) & 0xFF
                    c ^= c >> 4
                    x = ((x << 8) ^ (c << 12) ^ (c << 5) ^ c) & 0xFFFF
                    i += 1
                if x != (b[e] << 8) | b[e + 1]:
                    r = -5  # E_CRC
                elif (b[1] >> 4) & 12:
                    r = -6  # E_FLAGS
                else:
                    r = o
        k[1] = 0
        k[2] = r
        return h
    k[0] = m
    return h


# The device's answer to a POLL on a serial link without auth, in one call: device.respond where
# _viper loads (device.py binds it; its bytecode respond, the reference, is `slow` here: every
# frame this does not take goes there, and tests/mpy/core_runner.py runs both on responder.json).
# Taken: a POLL (16 or 17 bytes, unsigned) on a link whose auth is off (L[15] None) and which has
# a COBS buffer (L[13]): device.respond's copy rule and max_frames check, then EventRing.respond's
# burst: the fields read in place, each frame built COBS-framed in L[13] (read at each frame) by
# the native answer (EVENTS) or answer_cobs' bytecode (NO_EVENT, RECOVERY, follow) and handed to
# d(L, L[13], size, a); then the POLL is the link's last. Anything else (HELLO, a signed frame,
# auth, a datagram link) goes to slow. The same rules in bytecode cost ~16,700 cycles a POLL on an
# RP2040 (device.respond's own, EventRing.respond's): attribute lookups, the fields byte by byte,
# a method call of 8 arguments. Allocates nothing but what d does (answer_cobs' bytecode frame,
# over 11 words, comes from the heap and goes back at its return unless the heap is locked, as
# the agent has it: then it is on the C stack).
slow = None


@micropython.viper
def respond(L, b, n: int, a, ring, d) -> int:
    p = ptr8(b)
    c = L[13]
    if (n != 16 and n != 17) or p[0] != 0x22 or p[1] & 0x20 or not c or L[15]:
        return int(slow(L, b, n, a, ring, d))  # type: ignore[misc]
    k = (p[3] << 16) | (p[8] << 8) | p[9]  # messages.poll_key
    if k == int(L[17]):
        return -3  # device._R_COPY: its answer went
    f = 1
    if n == 17:
        f = p[14]
    q = f >> 7  # follow
    f &= 0x7F
    if f == 0 or f > 32:
        return -1  # device._R_BAD: max_frames not 1..32
    x = int(L[16])  # max_bytes: the link's budget, or less if the POLL asks less
    if (p[12] << 8) | p[13] < x:
        x = (p[12] << 8) | p[13]
    buf = L[2]
    m = int(len(buf))
    st = ring._st
    s = ptr32(st)
    hi = (p[6] << 8) | p[7]
    lo = (p[8] << 8) | p[9]
    e = 0  # frames dropped
    i = 0  # the frame's index
    while True:
        o = int(answer(hi, lo, p[3], st, buf, c, ring.TABLE, (p[10] << 8) | p[11], x, i, m))
        if o < 0:  # NO_EVENT, RECOVERY: answer_cobs's bytecode (follow: a RECOVERY that leaves a
            g = 0  # frame goes on)
            if q and i + 1 < f:
                g = 1
            o = int(ring.answer_cobs(buf, c, hi, lo, (p[10] << 8) | p[11], x, p[3], i, g))
        e += int(d(L, c, o, a))
        i += 1
        if i == f or s[10] == 0:  # ring._SBACK: the events held after the last one carried
            break
        hi = s[8]
        lo = s[9]
        c = L[13]
    L[17] = k
    return e


# On a Thumb port (rp2) the answer's byte loop, the COBS encoder, the CRC and the scan are _thumb's
# (asm_thumb: ~4x faster a byte, a third of the code); the viper ones above are then garbage, their
# code freed.
try:
    from leadwire._thumb import crc16_viper, encode_into, frame, scan  # type: ignore[no-redef, assignment]  # noqa: F811, E501
except (ImportError, SyntaxError, NotImplementedError, ValueError):  # not a Thumb port
    pass
