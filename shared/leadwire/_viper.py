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


# The serial receive path (framing.StreamDecoder.scan and its COBS decode have the bytecode twins
# and say what they do; same names, so no new qstr): in bytecode a received byte cost ~5,000
# cycles on an RP2040 (a POLL ~100,000).


@micropython.viper
def index(s: ptr8, h: int, n: int) -> int:  # noqa: F821
    # the position of the first 0 byte in s[h:n], or n
    while h < n:
        if s[h] == 0:
            return h
        h += 1
    return n


@micropython.viper
def decode_in_place(buf: ptr8, n: int) -> int:  # noqa: F821
    i = 0
    o = 0
    while i < n:
        code = buf[i]
        if code == 0:
            return -1
        i += 1
        end = i + code - 1
        if end > n:
            return -1
        while i < end:
            b = buf[i]
            if b == 0:
                return -1
            buf[o] = b
            o += 1
            i += 1
        if code != 0xFF and i < n:
            buf[o] = 0
            o += 1
    return o
