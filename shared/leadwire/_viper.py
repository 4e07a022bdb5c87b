# Native-code versions of the byte loops on the device hot path (CRC, copy, the ring's batch of
# samples).
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



# The ring's batch write of a sensor's samples (ring.py has its bytecode twin and says what it
# does). Every name a board loads is a qstr that stays (and past a pool's size the interpreter
# adds a larger pool), so it reuses names the core already has: s, h, n, c, k, channel, d, m, b.


@micropython.viper
def samples(s: ptr8, h: int, n: int, c: int, k: int, channel: int, d: ptr8, m: int, b: int):  # noqa: F821
    # k records from slot h (stride n, c slots): channel, length m, the u16 b (+1 per record),
    # then d[2:m]; b -1: d[:m] as it is (one event: EventRing.write)
    while k > 0:
        p = h * n
        s[p] = channel
        s[p + 1] = m >> 8
        s[p + 2] = m & 0xFF
        p += 3
        i = 0
        if b >= 0:
            s[p] = (b >> 8) & 0xFF
            s[p + 1] = b & 0xFF
            b += 1
            i = 2
        while i < m:
            s[p + i] = d[i]
            i += 1
        h += 1
        if h == c:
            h = 0
        k -= 1


# COBS encoding of a serial frame (framing.encode_into has the bytecode twin and says what it does;
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


# -- the serial receive path in one call: framing.scan says what it does and has the bytecode twin
# (the same rules: framing.decode_in_place and wire.check, whose codes are the literals here;
# both checked on the same streams, tests/mpy/core_runner.py test_scan_vectors). In bytecode a
# received byte cost ~5,000 cycles on an RP2040 (a POLL ~100,000); the scan, the COBS decode and
# the check were four calls. Arguments named as the twin's (names a board already has).


@micropython.viper
def scan(s: ptr8, h: int, n: int, b: ptr8, k: ptr16, d: ptr16) -> int:  # noqa: F821
    m = k[0]  # stuffed bytes held
    c = k[3]
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
            i = 0  # COBS decode in place (framing.decode_in_place)
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
                    x = ((x << 8) & 0xFFFF) ^ d[((x >> 8) ^ b[i]) & 0xFF]
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
