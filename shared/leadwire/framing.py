# Serial framing: each frame is COBS-encoded and followed by one 0x00 delimiter.
#
# The host uses the `cobs` package; the device has its own allocation-free encoder and in-place
# decoder here. Both are tested against the same vectors (tests/vectors/cobs.json).
# StreamDecoder takes bytes as they arrive and yields frames; after garbage, a lost byte or an
# overlong run it resynchronises at the next delimiter, reporting one typed error.
from leadwire import wire
from leadwire._compat import MICROPYTHON
from leadwire.bufcopy import copy_into

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


def index(s, h, n):
    """The position of the first 0 byte in s[h:n], or n. Allocates nothing."""
    while h < n:
        if s[h] == 0:
            return h
        h += 1
    return n


if MICROPYTHON:  # the native twins of the receive path (decode_in_place, index) where they load
    try:
        from leadwire._viper import decode_in_place, index  # type: ignore[no-redef, assignment]
    except (ImportError, SyntaxError, NotImplementedError, ValueError):  # ValueError: _viper.mpy refused
        pass


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


class StreamDecoder:
    """Bytes in, frames out. Device path: scan() + frame/ready (no allocation); host: feed()."""

    def __init__(self, max_frame=wire.MAX_FRAME):
        self.frame = bytearray(max_encoded(max_frame))  # stuffed bytes, then the decoded frame
        self._n = 0
        self._overflow = False
        self.ready = 0  # after scan(): >0 decoded frame length in self.frame, <0 -E_* code
        self.frames = 0
        self.errors = 0

    def scan(self, data, pos, end):
        """Consume data[pos:end] up to and including the next delimiter; return the new pos.

        Afterwards `ready` is > 0 when a valid frame of that length is in self.frame, < 0 (minus
        an E_* code) when a bad frame was dropped, 0 when more bytes are needed.
        """
        self.ready = 0
        buf = self.frame
        cap = len(buf)
        n = self._n
        while pos < end:
            b = index(data, pos, end)  # the next delimiter (or end): the bytes before it are kept
            k = b - pos
            if n + k > cap:  # what does not fit is dropped: an oversize frame
                k = cap - n
                self._overflow = True
            if k > 0:
                copy_into(buf, n, data, pos, k)
                n += k
            pos = b
            if pos == end:
                break
            pos += 1
            self._n = 0
            if self._overflow:
                self._overflow = False
                self.errors += 1
                self.ready = -wire.E_OVERSIZE
                return pos
            if n == 0:
                continue  # empty frame: a delimiter used to resynchronise
            m = _unstuff(buf, n)
            if m < 0:
                self.errors += 1
                self.ready = -wire.E_COBS
                return pos
            code = wire.check(buf, m)
            if code:
                self.errors += 1
                self.ready = -code
                return pos
            self.frames += 1
            self.ready = m
            return pos
        self._n = n
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
