# The bytecode twins of _viper's native code: what runs where _viper does not load (CPython, ports
# without a native emitter, a refused _viper.mpy), and the reference the native code is checked
# against on the same vectors on every tier (tests/mpy/core_runner.py, twin_checks.py). A module of
# its own: a board running the native code never loads it (its bytecode would be heap there).
#   write, write_samples   EventRing's write (ring.py says what they do; the state's slots are
#                          ring.py's _S* numbers)
#   encode_into            framing's COBS encoder
#   decode_in_place        the COBS decoder (scan_py's, and the host's)
#   scan_py                framing's serial receive path (framing.scan)
#   encode, decode         a frame COBS-encoded with its delimiter, and decoded (host and test
#                          conveniences: they allocate)
# Argument names as _viper's: each name a board loads is a qstr, even in code it never runs.
from leadwire import wire
from leadwire._compat import const
from leadwire.bufcopy import copy_into

_SHEAD = const(0)
_SHI = const(1)
_SLO = const(2)
_SN = const(3)
_SOVER = const(4)
_SCAP = const(5)
_SSTRIDE = const(6)
_SREC = const(16)


def write_samples(self, d, channel, m, k, b):
    # EventRing.write_samples in bytecode: k records after the newest (k <= capacity): channel,
    # length m, the u16 b (+1 each), then d[2:m]; b -1: d[:m] as it is. The ring's state follows:
    # as after k single writes.
    st = self._st
    s = self._store
    c = st[_SCAP]
    n = st[_SSTRIDE]
    h = st[_SHEAD] + 1  # the slot of the first
    if h == c:
        h = 0
    x = st[_SHEAD] + k
    if x >= c:
        x -= c
    st[_SHEAD] = x
    x = st[_SLO] + k
    if x > 0xFFFF:
        x -= 0x10000
        st[_SHI] = (st[_SHI] + 1) & 0xFFFF
    st[_SLO] = x
    x = st[_SN] + k - c  # pushed out, when above 0
    if x <= 0:
        st[_SN] += k
    elif st[_SOVER] < 0x3FFFFFFF - x:
        st[_SN] = c
        st[_SOVER] += x
    else:
        st[_SN] = c
        st[_SOVER] = 0x3FFFFFFF
    while k > 0:
        p = h * n + st[_SREC]  # the record
        s[p] = channel
        s[p + 1] = m >> 8
        s[p + 2] = m & 0xFF
        if b < 0:
            copy_into(s, p + 3, d, 0, m)
        else:
            s[p + 3] = (b >> 8) & 0xFF
            s[p + 4] = b & 0xFF
            copy_into(s, p + 5, d, 2, m - 2)
            b = (b + 1) & 0xFFFF
        h += 1
        if h == c:
            h = 0
        k -= 1


def write(self, d, channel, m):
    # EventRing.write in bytecode
    if m > self._st[13] or channel > 0xFF:  # (13: the slot size)
        raise ValueError("event too large")
    write_samples(self, d, channel, m, 1, -1)


def encode_into(src, n, dst, d=0):
    """COBS-encode src[:n] into dst at d; returns the end position. Allocates nothing (framing's
    where _viper does not load; _viper.encode_into takes every argument: viper has no defaults)."""
    code_pos = d
    d += 1
    code = 1
    for i in range(n):
        b = src[i]
        if b == 0:
            dst[code_pos] = code
            code_pos = d
            d += 1
            code = 1
        else:
            dst[d] = b
            d += 1
            code += 1
            if code == 0xFF and i < n - 1:
                dst[code_pos] = code
                code_pos = d
                d += 1
                code = 1
    dst[code_pos] = code
    return d


def decode_in_place(buf, n):
    """COBS-decode buf[:n] in place; returns the decoded length, or -1 if the stuffing is bad."""
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


# The serial receive path, s[h:k[4]] up to and including the next delimiter in one call: the
# bytes kept in the frame buffer b (k[3] bytes: the stuffed bytes, then the decoded frame), the
# COBS decode and wire.check. k is the decoder's state, array("i"): bytes held, overflow, ready,
# the size of b, the end of the bytes in s (the caller's). Returns the new h; afterwards
# k[2] (ready) is > 0 when a valid frame of that length is in b (wire.check passed), < 0 (minus
# an E_* code) when a bad frame was dropped, 0 when more bytes are needed. What does not fit in b
# is dropped (E_OVERSIZE at its delimiter); empty frames (delimiters to resynchronise) are
# skipped, those right after a frame with it. Allocates nothing. framing.scan is _viper.scan where
# it loads (one call for the whole path: in bytecode a byte cost ~5,000 cycles on an RP2040), else
# this; both run the same streams on every tier (core_runner test_scan_vectors).
def scan_py(s, h, b, k):
    # the bytecode twin of _viper.scan (argument names as its: each name a board loads is a qstr)
    m = k[0]
    c = k[3]
    n = k[4]
    k[2] = 0
    while h < n:
        x = s[h]
        h += 1
        if x:
            if m < c:
                b[m] = x
                m += 1
            else:
                k[1] = 1
            continue
        if m == 0:
            continue
        while h < n and s[h] == 0:
            h += 1
        k[0] = 0
        if k[1]:
            k[1] = 0
            k[2] = -wire.E_OVERSIZE
            return h
        m = decode_in_place(b, m)
        x = wire.E_COBS if m < 0 else wire.check(b, m)
        k[2] = -x if x else m
        return h
    k[0] = m
    return h


def encode(data):
    """COBS-encode a frame and append the delimiter (allocates)."""
    out = bytearray(len(data) + len(data) // 254 + 2)  # framing.max_encoded + the delimiter
    end = encode_into(data, len(data), out, 0)
    out[end] = 0
    return bytes(out[: end + 1])


def decode(data):
    """COBS-decode one stuffed frame (without delimiter) -> bytes, or WireError(E_COBS)."""
    buf = bytearray(data)
    m = decode_in_place(buf, len(buf))
    if m < 0:
        raise wire.WireError(wire.E_COBS)
    return bytes(buf[:m])
