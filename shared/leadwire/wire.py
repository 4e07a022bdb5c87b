# The leadwire frame: a 10-byte header, the payload, a 2-byte CRC trailer (12 bytes of overhead).
#
#  byte 0     version (3 bits) << 5 | type (5 bits)
#  byte 1     flags (4 bits) << 4 | priority (4 bits, 0..15, higher goes first; spec 002)
#  byte 2     channel (0..255)
#  byte 3     message id (0..255, wraps): NOTIFY/CLOSE: the message its fragments share (spec 002);
#             requests: a tag the client picks, which the answer (HELLO, EVENTS, NO_EVENT, RECOVERY,
#             ACK of SUBSCRIBE) echoes, so a delayed answer to an older request is told apart
#  bytes 4-5  fragment index (5 bits, 0..31) << 11 | payload length (11 bits, 0..2047), big-endian
#  bytes 6-9  seq (u32, big-endian): offset, MessageNumber, boot epoch... by type (messages.py)
#  payload    length bytes
#  (8 bytes   with flag F_AUTH only: counter low u16 + truncated HMAC tag; auth.py)
#  2 bytes    CRC-16/CCITT-FALSE over all the bytes before it, big-endian
#
# Device hot path: put_header() and seal() write into a preallocated bytearray and allocate
# nothing; seq is given as two 16-bit halves so no int above 2^30 is ever made (32-bit ports).
# check() validates a received frame in place, returning an error code instead of raising.
# Frame objects, encode() and decode() are in codec.py: the device imports only this module on
# its hot path (every module loaded costs heap on a board; see docs/firmware.md).
from leadwire._compat import const
from leadwire.crc16 import crc16

VERSION = const(1)
HEADER_SIZE = const(10)
CRC_SIZE = const(2)
OVERHEAD = const(12)
MAX_PAYLOAD = const(2047)
MAX_INDEX = const(31)
MAX_FRAME = const(2059)  # OVERHEAD + MAX_PAYLOAD

# EVENTS batches and NOTIFY bodies: count u8, backlog u16, then records of channel u8, length u16, data
BATCH_HEAD = const(3)
RECORD_HEAD = const(3)
MAX_BATCH = const(255)

# Frame types
HELLO = const(1)
POLL = const(2)
EVENTS = const(3)
NO_EVENT = const(4)
RECOVERY = const(5)
SUBSCRIBE = const(6)
NOTIFY = const(7)
ACK = const(8)
CLOSE = const(9)
ERROR = const(10)
MAX_TYPE = const(10)


# Flags (high nibble of byte 1)
F_LAST = const(1)  # last fragment of its message
F_AUTH = const(2)  # signed: an 8-byte trailer (counter, tag) before the CRC (auth.py)
F_RESERVED = const(12)

# Error codes returned by check() and carried by WireError.code (names in codec.ERROR_NAMES)
OK = const(0)
E_SHORT = const(1)  # fewer bytes than header + CRC
E_VERSION = const(2)
E_TYPE = const(3)
E_LENGTH = const(4)  # length field does not match the bytes present
E_CRC = const(5)
E_FLAGS = const(6)  # reserved or unsupported flag set
E_COBS = const(7)  # serial framing: bad COBS stuffing
E_OVERSIZE = const(8)  # serial framing: more bytes than the largest frame before a delimiter
E_PAYLOAD = const(9)  # payload does not match its type's layout (messages.py)
E_AUTH = const(10)  # authentication: wrong tag (forged, wrong key, no session; auth.py)
E_REPLAY = const(11)  # authentication: a counter already seen, too old, or an older session's
E_UNSIGNED = const(12)  # authentication required, frame not signed
AUTH_SIZE = const(8)  # the trailer of a signed frame (auth.py)

# Sizes of the fixed-size requests a device checks a received frame against (unsigned: a signed
# frame is AUTH_SIZE more). The firmware copies them as `_X = const(n)` (an attribute lookup per
# frame otherwise); tests/firmware/test_records.py checks the copies and these against frames the
# core encodes (messages.py). A HELLO request is OVERHEAD (empty payload).
POLL_SIZE = const(HEADER_SIZE + 4 + CRC_SIZE)  # 16: max_events u16, max_bytes u16
POLL_BURST_SIZE = const(POLL_SIZE + 1)  # 17: ... and max_frames u8 (a burst), at HEADER_SIZE + 4
ACK_SIZE = const(HEADER_SIZE + 2 + CRC_SIZE)  # 14: status u16


class WireError(Exception):
    """The one error a decoder raises for bad data received from a peer (a remote error)."""

    def __init__(self, code, detail=""):
        super().__init__(code, detail)
        self.code = code
        self.detail = detail

    def __str__(self):
        return "bad frame (error %d)%s" % (self.code, ": " + self.detail if self.detail else "")


def put_header(buf, ftype, flags, priority, channel, message_id, index, length, seq_hi, seq_lo):
    # 0 bytes allocated: every value is a small int written byte by byte.
    buf[0] = (VERSION << 5) | ftype
    buf[1] = (flags << 4) | priority
    buf[2] = channel
    buf[3] = message_id
    buf[4] = (index << 3) | (length >> 8)
    buf[5] = length & 0xFF
    buf[6] = seq_hi >> 8
    buf[7] = seq_hi & 0xFF
    buf[8] = seq_lo >> 8
    buf[9] = seq_lo & 0xFF


def seal(buf, length):
    """Append the CRC after a header + `length` payload bytes already in buf; returns frame size."""
    end = HEADER_SIZE + length
    c = crc16(buf, 0, end)
    buf[end] = c >> 8
    buf[end + 1] = c & 0xFF
    return end + CRC_SIZE


def check(buf, n):
    """Validate the frame in buf[:n] in place: OK (0) or an E_* code. Allocates nothing."""
    if n < OVERHEAD:
        return E_SHORT
    b0 = buf[0]
    if (b0 >> 5) != VERSION:
        return E_VERSION
    t = b0 & 0x1F
    if t == 0 or t > MAX_TYPE:
        return E_TYPE
    if ((buf[4] & 0x07) << 8) | buf[5] != n - (OVERHEAD + AUTH_SIZE if buf[1] & 0x20 else OVERHEAD):
        return E_LENGTH
    if crc16(buf, 0, n - CRC_SIZE) != (buf[n - 2] << 8) | buf[n - 1]:
        return E_CRC
    if (buf[1] >> 4) & F_RESERVED:
        return E_FLAGS
    return OK


def frame_type(buf):
    return buf[0] & 0x1F


def seq_hi(buf):
    return (buf[6] << 8) | buf[7]


def seq_lo(buf):
    return (buf[8] << 8) | buf[9]


def tag(buf):
    """The message id byte: a request's tag, which its answer echoes."""
    return buf[3]
