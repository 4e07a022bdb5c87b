# Serial framing: each frame is COBS-encoded and followed by one 0x00 delimiter.
#
# The host uses the `cobs` package; the device has its own allocation-free encoder, in-place
# decoder and receive scan (native code, or their bytecode twins in _twins). All are tested against
# the same vectors (tests/vectors/cobs.json, core_runner's scan vectors).
# StreamDecoder takes bytes as they arrive and yields frames; after garbage, a lost byte or an
# overlong run it resynchronises at the next delimiter, reporting one typed error.
from array import array

from leadwire import wire
from leadwire._compat import MICROPYTHON

DELIMITER = 0


def max_encoded(n):
    """Largest COBS encoding of n bytes (without the delimiter)."""
    return n + n // 254 + 1


# encode_into(src, n, dst, d): COBS-encode src[:n] into dst at d; returns the end position.
# scan(s, h, b, k): the serial receive path, s[h:k[4]] up to and including the next delimiter in
# one call: the bytes kept in the frame buffer b (k[3] bytes: the stuffed bytes, then the decoded
# frame), the COBS decode and wire.check. k is the decoder's state, array("i"): bytes held,
# overflow, ready, the size of b, and the end of the bytes in s, which the caller sets (once for
# a chunk it scans frame by frame: four arguments, what asm_thumb takes). Returns the new h; afterwards
# k[2] (ready) is > 0 when a valid frame of that length is in b (wire.check passed), < 0 (minus an
# E_* code) when a bad frame was dropped, 0 when more bytes are needed. What does not fit in b is
# dropped (E_OVERSIZE at its delimiter); empty frames (delimiters to resynchronise) are skipped,
# those right after a frame with it.
# Both allocate nothing. On MicroPython they are _viper's native code where it loads (every
# argument given: viper has no defaults; the scan is one call for the whole path, where in
# bytecode a received byte cost ~5,000 cycles on an RP2040); elsewhere _twins' bytecode
# (encode_into, scan_py), which a board running the native code never loads.
if MICROPYTHON:
    try:
        from leadwire._viper import encode_into, scan
    except (ImportError, SyntaxError, NotImplementedError, ValueError):  # ValueError: _viper.mpy refused
        from leadwire._twins import encode_into  # type: ignore[assignment]
        from leadwire._twins import scan_py as scan  # type: ignore[assignment]
else:
    # the host: encode and decode by the `cobs` package where it is installed, else the twins
    from leadwire._twins import decode_in_place, encode, encode_into, scan_py  # noqa: F401
    from leadwire._twins import scan_py as scan

    _encode_own = encode  # the device's encoder and decoder, for the host's tests and fuzzers
    _unstuff_own = decode_in_place
    _unstuff = decode_in_place
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

    def decode(data):  # type: ignore[misc]
        """COBS-decode one stuffed frame (without delimiter) -> bytes, or WireError(E_COBS)."""
        buf = bytearray(data)
        m = _unstuff(buf, len(buf))
        if m < 0:
            raise wire.WireError(wire.E_COBS)
        return bytes(buf[:m])


class StreamDecoder:
    """Bytes in, frames out: scan() + frame/ready (no allocation), feed() (the host's). The agent
    calls the module's scan(data, pos, frame, st) itself, with the decoder's frame and st (st[4]:
    the end)."""

    def __init__(self, max_frame=wire.MAX_FRAME):
        self.frame = bytearray(max_encoded(max_frame))  # stuffed bytes, then the decoded frame
        self.st = array("i", (0, 0, 0, len(self.frame), 0))  # scan's state: held, overflow, ready, size, end
        self.ready = 0  # after scan(): >0 decoded frame length in self.frame, <0 -E_* code
        self.frames = 0
        self.errors = 0

    def scan(self, data, pos, end):
        """Consume data[pos:end] up to and including the next delimiter; return the new pos.

        Afterwards `ready` is > 0 when a valid frame of that length is in self.frame, < 0 (minus
        an E_* code) when a bad frame was dropped, 0 when more bytes are needed.
        """
        self.st[4] = end
        pos = scan(data, pos, self.frame, self.st)  # type: ignore[arg-type]  # viper's ptr8/ptr32 are buffers
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
