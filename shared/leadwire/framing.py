# Serial framing: each frame is COBS-encoded and followed by one 0x00 delimiter.
#
# The host uses the `cobs` package; the device has its own allocation-free encoder and in-place
# decoder here. Both are tested against the same vectors (tests/vectors/cobs.json).
# StreamDecoder takes bytes as they arrive and yields frames; after garbage, a lost byte or an
# overlong run it resynchronises at the next delimiter, reporting one typed error.
from array import array

from leadwire import wire
from leadwire._compat import MICROPYTHON
from leadwire.crc16 import TABLE

DELIMITER = 0


def max_encoded(n):
    """Largest COBS encoding of n bytes (without the delimiter)."""
    return n + n // 254 + 1


def encode_into(src, n, dst, d=0):
    """COBS-encode src[:n] into dst at d; returns the end position. Allocates nothing. On
    MicroPython this is the viper twin where it loads: give d there (viper has no defaults)."""
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


if MICROPYTHON:  # native code where the port has an emitter and takes _viper.mpy (every argument given)
    try:
        from leadwire._viper import encode_into  # type: ignore[no-redef, assignment]
    except (ImportError, SyntaxError, NotImplementedError, ValueError):  # ValueError: _viper.mpy refused
        pass


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


def _encode_own(data):
    out = bytearray(max_encoded(len(data)) + 1)
    end = encode_into(data, len(data), out, 0)
    out[end] = DELIMITER
    return bytes(out[: end + 1])


def _unstuff_own(buf, n):
    return decode_in_place(buf, n)


encode = _encode_own
_unstuff = _unstuff_own

if not MICROPYTHON:
    try:
        from cobs import cobs as _cobs

        def encode(data):  # type: ignore[misc]
            """COBS-encode a frame and append the delimiter."""
            return _cobs.encode(bytes(data)) + b"\x00"

        def _unstuff(buf, n):  # type: ignore[misc]
            try:
                out = _cobs.decode(bytes(buf[:n]))
            except _cobs.DecodeError:
                return -1
            buf[: len(out)] = out
            return len(out)

    except ImportError:  # core used without the host dependencies
        pass


def decode(data):
    """COBS-decode one stuffed frame (without delimiter) -> bytes, or WireError(E_COBS)."""
    buf = bytearray(data)
    m = _unstuff(buf, len(buf))
    if m < 0:
        raise wire.WireError(wire.E_COBS)
    return bytes(buf[:m])


# The serial receive path, s[h:n] up to and including the next delimiter in one call: the bytes
# kept in the frame buffer b (k[3] bytes: the stuffed bytes, then the decoded frame), the COBS
# decode and wire.check. k is the decoder's state, array("h"): bytes held, overflow, ready, the
# size of b; d the CRC-16 table (crc16.TABLE: the native scan's). Returns the new h; afterwards
# k[2] (ready) is > 0 when a valid frame of that length is in b (wire.check passed), < 0 (minus
# an E_* code) when a bad frame was dropped, 0 when more bytes are needed. What does not fit in b
# is dropped (E_OVERSIZE at its delimiter); empty frames (delimiters to resynchronise) are
# skipped, those right after a frame with it. Allocates nothing. Native code on MicroPython where
# _viper loads (one call for the whole path: in bytecode a byte cost ~5,000 cycles on an RP2040);
# scan_py is the bytecode twin (CPython, ports without a native emitter, a refused _viper.mpy),
# and both run the same streams on every tier (core_runner test_scan_vectors).
def scan_py(s, h, n, b, k, d):
    # the bytecode twin of _viper.scan (argument names as its: each name a board loads is a qstr)
    m = k[0]
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


scan = scan_py
if MICROPYTHON:
    try:
        from leadwire._viper import scan  # type: ignore[no-redef, assignment]
    except (ImportError, SyntaxError, NotImplementedError, ValueError):  # ValueError: _viper.mpy refused
        pass


class StreamDecoder:
    """Bytes in, frames out: scan() + frame/ready (no allocation), feed() (the host's). The agent
    calls the module's scan(data, pos, end, frame, st, TABLE) itself, with the decoder's frame and
    st."""

    def __init__(self, max_frame=wire.MAX_FRAME):
        self.frame = bytearray(max_encoded(max_frame))  # stuffed bytes, then the decoded frame
        self.st = array("h", (0, 0, 0, len(self.frame)))  # scan's state: held, overflow, ready, size
        self.ready = 0  # after scan(): >0 decoded frame length in self.frame, <0 -E_* code
        self.frames = 0
        self.errors = 0

    def scan(self, data, pos, end):
        """Consume data[pos:end] up to and including the next delimiter; return the new pos.

        Afterwards `ready` is > 0 when a valid frame of that length is in self.frame, < 0 (minus
        an E_* code) when a bad frame was dropped, 0 when more bytes are needed.
        """
        pos = scan(data, pos, end, self.frame, self.st, TABLE)
        r = self.st[2]
        self.ready = r
        if r > 0:
            self.frames += 1
        elif r < 0:
            self.errors += 1
        return pos

    def feed(self, data):
        """Host convenience: every Frame or WireError completed by these bytes, in order."""
        from leadwire import codec  # not loaded on the device unless used

        out = []
        pos = 0
        end = len(data)
        while pos < end:
            pos = self.scan(data, pos, end)
            if self.ready > 0:
                out.append(codec.decode(bytes(self.frame[: self.ready])))
            elif self.ready < 0:
                out.append(wire.WireError(-self.ready))
        return out
