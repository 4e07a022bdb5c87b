# Frame objects and whole-frame encode/decode (host side, device control path and tests).
# The byte layout itself is defined once, in wire.py; this module only builds on it.
from leadwire import wire
from leadwire.wire import F_LAST, HEADER_SIZE, OVERHEAD, WireError

TYPE_NAMES = {
    wire.HELLO: "HELLO",
    wire.POLL: "POLL",
    wire.EVENTS: "EVENTS",
    wire.NO_EVENT: "NO_EVENT",
    wire.RECOVERY: "RECOVERY",
    wire.SUBSCRIBE: "SUBSCRIBE",
    wire.NOTIFY: "NOTIFY",
    wire.ACK: "ACK",
    wire.CLOSE: "CLOSE",
    wire.ERROR: "ERROR",
}

ERROR_NAMES = {
    wire.E_SHORT: "short",
    wire.E_VERSION: "version",
    wire.E_TYPE: "type",
    wire.E_LENGTH: "length",
    wire.E_CRC: "crc",
    wire.E_FLAGS: "flags",
    wire.E_COBS: "cobs",
    wire.E_OVERSIZE: "oversize",
    wire.E_PAYLOAD: "payload",
    wire.E_AUTH: "auth",
    wire.E_REPLAY: "replay",
    wire.E_UNSIGNED: "unsigned",
}


def error_name(code):
    return ERROR_NAMES.get(code, "unknown")


class Frame:
    """A decoded frame (host side, and device control path). Allocates; not for the hot path."""

    __slots__ = ("channel", "flags", "index", "message_id", "payload", "priority", "seq", "type")

    def __init__(self, type, seq=0, payload=b"", channel=0, priority=0, flags=F_LAST, message_id=0, index=0):
        self.type = type
        self.seq = seq
        self.payload = bytes(payload)
        self.channel = channel
        self.priority = priority
        self.flags = flags
        self.message_id = message_id
        self.index = index

    @property
    def last(self):
        return bool(self.flags & F_LAST)

    def _key(self):
        return (
            self.type,
            self.seq,
            self.payload,
            self.channel,
            self.priority,
            self.flags,
            self.message_id,
            self.index,
        )

    def __eq__(self, other):
        return isinstance(other, Frame) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        return "Frame(%s seq=%d ch=%d prio=%d flags=%d mid=%d idx=%d payload=%r)" % (
            TYPE_NAMES.get(self.type, str(self.type)),
            self.seq,
            self.channel,
            self.priority,
            self.flags,
            self.message_id,
            self.index,
            self.payload,
        )


def encode(frame):
    """Frame -> bytes. Raises ValueError for values that do not fit (a local error)."""
    f = frame
    n = len(f.payload)
    if not 1 <= f.type <= wire.MAX_TYPE:
        raise ValueError("frame type %r out of range" % (f.type,))
    if n > wire.MAX_PAYLOAD:
        raise ValueError("payload of %d bytes exceeds %d" % (n, wire.MAX_PAYLOAD))
    if not 0 <= f.priority <= 15 or not 0 <= f.flags <= 15:
        raise ValueError("priority and flags are 4-bit values")
    if not 0 <= f.channel <= 255 or not 0 <= f.message_id <= 255 or not 0 <= f.index <= wire.MAX_INDEX:
        raise ValueError("channel, message id or fragment index out of range")
    if not 0 <= f.seq <= 0xFFFFFFFF:
        raise ValueError("seq must be a u32")
    buf = bytearray(OVERHEAD + n)
    wire.put_header(
        buf, f.type, f.flags, f.priority, f.channel, f.message_id, f.index, n, f.seq >> 16, f.seq & 0xFFFF
    )
    buf[HEADER_SIZE : HEADER_SIZE + n] = f.payload
    wire.seal(buf, n)
    return bytes(buf)


def decode(data):
    """bytes -> Frame, or WireError. Never raises anything else, whatever the input."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise WireError(wire.E_SHORT, "not a byte string")
    n = len(data)
    code = wire.check(data, n)
    if code:
        raise WireError(code)
    # a signed frame decodes as its unsigned self: the trailer is checked by auth.Endpoint
    end = n - wire.CRC_SIZE - (wire.AUTH_SIZE if (data[1] >> 4) & wire.F_AUTH else 0)
    return Frame(
        wire.frame_type(data),
        (data[6] << 24) | (data[7] << 16) | (data[8] << 8) | data[9],
        data[HEADER_SIZE:end],
        data[2],
        data[1] & 0x0F,
        (data[1] >> 4) & ~wire.F_AUTH,
        data[3],
        data[4] >> 3,
    )
