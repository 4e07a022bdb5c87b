# Native-code versions of the byte loops on the device hot path (CRC, copy, the ring's batch
# answer and its batch of samples).
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



# The ring's two batch loops (ring.py has their bytecode twins and says what they do). Every
# name a board loads is a qstr that stays (and past a pool's size the interpreter adds a larger
# pool), so these reuse names the core already has: s, h, c, k, n, m, b, d, buf, pos, channel.


@micropython.viper
def gather(buf: ptr8, pos: int, s: ptr8, h: int, n: int, c: int, k: int, m: int, b: int) -> int:  # noqa: F821
    # records from slot h (stride n, c slots; k + 1 of them up to the newest) into buf at pos:
    # at most m, within b payload bytes counting the 3-byte batch head, at least one.
    # Returns taken << 12 | used (255 and 2047 at most).
    used = 3
    taken = 0
    while k >= 0 and taken < m:
        p = h * n
        size = 3 + ((s[p + 1] << 8) | s[p + 2])
        if taken > 0 and used + size > b:
            break
        i = 0
        while i < size:
            buf[pos + i] = s[p + i]
            i += 1
        pos += size
        used += size
        taken += 1
        k -= 1
        h += 1
        if h == c:
            h = 0
    return (taken << 12) | used


@micropython.viper
def samples(s: ptr8, h: int, n: int, c: int, k: int, channel: int, d: ptr8, m: int, b: int):  # noqa: F821
    # k records from slot h (stride n, c slots): channel, length m, the u16 b (+1 per record),
    # then d[2:m]
    while k > 0:
        p = h * n
        s[p] = channel
        s[p + 1] = m >> 8
        s[p + 2] = m & 0xFF
        s[p + 3] = (b >> 8) & 0xFF
        s[p + 4] = b & 0xFF
        p += 3
        i = 2
        while i < m:
            s[p + i] = d[i]
            i += 1
        b += 1
        h += 1
        if h == c:
            h = 0
        k -= 1
