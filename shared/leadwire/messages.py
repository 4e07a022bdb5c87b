# Payload layouts per frame type (the header is in wire.py). All integers big-endian.
#
#  HELLO     host->dev: empty payload = "send your HELLO".  dev->host: seq = boot epoch;
#            capacity u16, slot_size u16, frame_size u16, boots u16, then three short strings
#            (u8 length + UTF-8): board id, firmware version, board kind.
#  POLL      seq = n (client offset); max_events u16, max_bytes u16 (payload budget of the answer)
#  EVENTS    seq = offset of the first event (= s(n)); count u8, backlog u16 (events still queued
#            after this batch, saturated), then count records: channel u8, length u16, data.
#            Records hold consecutive offsets seq, s(seq), ...
#  NO_EVENT  seq = n; empty
#  RECOVERY  seq = n0 (oldest offset held); n1 u32 (newest offset held)
#  SUBSCRIBE seq = 0; count u8, then count channel ids (count 0 ends the session)
#  NOTIFY    seq = MessageNumber (spec 003); channel = report channel; fragmented by FrameQueue
#            (message id, index, F_LAST); the reassembled body uses the EVENTS record layout:
#            count u8, backlog u16 (0), records.
#  ACK       seq = the number acknowledged (MessageNumber, or 0 for SUBSCRIBE); status u16
#            (200-299 success, anything else a fault; spec 003)
#  CLOSE     channel, priority; empty
#  ERROR     code u16, UTF-8 text
import struct

from leadwire import codec, wire
from leadwire._compat import const

RECORD_HEAD = wire.RECORD_HEAD
BATCH_HEAD = wire.BATCH_HEAD
MAX_BATCH = wire.MAX_BATCH

STATUS_OK = const(200)
STATUS_TOO_LARGE = const(413)
STATUS_UNAVAILABLE = const(503)


def is_success(status):
    return 200 <= status <= 299


def _need(cond, what):
    if not cond:
        raise wire.WireError(wire.E_PAYLOAD, what)


# -- records (EVENTS batches and NOTIFY bodies) --------------------------------------------


def encode_records(records, backlog=0):
    """records: list of (channel, data). Returns the batch payload."""
    if len(records) > MAX_BATCH:
        raise ValueError("at most %d records in one batch" % MAX_BATCH)
    out = bytearray(struct.pack(">BH", len(records), min(backlog, 0xFFFF)))
    for channel, data in records:
        out += struct.pack(">BH", channel, len(data))
        out += data
    return bytes(out)


def decode_records(payload):
    """-> (backlog, [(channel, data), ...]); WireError(E_PAYLOAD) if the layout is broken."""
    n = len(payload)
    _need(n >= BATCH_HEAD, "batch header")
    count = payload[0]
    backlog = (payload[1] << 8) | payload[2]
    pos = BATCH_HEAD
    records = []
    for _ in range(count):
        _need(pos + RECORD_HEAD <= n, "record header")
        ch = payload[pos]
        ln = (payload[pos + 1] << 8) | payload[pos + 2]
        pos += RECORD_HEAD
        _need(pos + ln <= n, "record data")
        records.append((ch, bytes(payload[pos : pos + ln])))
        pos += ln
    _need(pos == n, "trailing bytes")
    return backlog, records


# -- HELLO -------------------------------------------------------------------------------


def _short_str(s):
    b = s.encode() if isinstance(s, str) else bytes(s)
    if len(b) > 255:
        raise ValueError("string longer than 255 bytes")
    return bytes([len(b)]) + b


class Hello:
    __slots__ = (
        "board",
        "board_id",
        "boot_epoch",
        "boots",
        "capacity",
        "firmware",
        "frame_size",
        "slot_size",
    )

    def __init__(self, boot_epoch, capacity, slot_size, frame_size, boots, board_id, firmware, board):
        self.boot_epoch = boot_epoch
        self.capacity = capacity
        self.slot_size = slot_size
        self.frame_size = frame_size
        self.boots = boots
        self.board_id = board_id
        self.firmware = firmware
        self.board = board

    def __eq__(self, other):
        return isinstance(other, Hello) and all(getattr(self, k) == getattr(other, k) for k in self.__slots__)

    def __repr__(self):
        return "Hello(%s)" % ", ".join("%s=%r" % (k, getattr(self, k)) for k in self.__slots__)


def hello_frame(h):
    payload = (
        struct.pack(">HHHH", h.capacity, h.slot_size, h.frame_size, h.boots & 0xFFFF)
        + _short_str(h.board_id)
        + _short_str(h.firmware)
        + _short_str(h.board)
    )
    return codec.Frame(wire.HELLO, h.boot_epoch, payload)


def decode_hello(frame):
    p = frame.payload
    _need(len(p) >= 11, "hello length")
    cap, slot, fsize, boots = struct.unpack(">HHHH", p[:8])
    pos = 8
    strs = []
    for _ in range(3):
        _need(pos < len(p), "hello string")
        ln = p[pos]
        _need(pos + 1 + ln <= len(p), "hello string")
        try:
            strs.append(bytes(p[pos + 1 : pos + 1 + ln]).decode())
        except UnicodeError:
            raise wire.WireError(wire.E_PAYLOAD, "hello string not UTF-8")
        pos += 1 + ln
    _need(pos == len(p), "hello trailing bytes")
    return Hello(frame.seq, cap, slot, fsize, boots, strs[0], strs[1], strs[2])


def hello_request():
    return codec.Frame(wire.HELLO, 0, b"")


# -- POLL / answers ------------------------------------------------------------------------


def poll_frame(n, max_events=1, max_bytes=wire.MAX_PAYLOAD):
    return codec.Frame(wire.POLL, n, struct.pack(">HH", max_events, max_bytes))


def decode_poll(frame):
    """-> (n, max_events, max_bytes)"""
    _need(len(frame.payload) == 4, "poll length")
    me, mb = struct.unpack(">HH", frame.payload)
    return frame.seq, me, mb


def recovery_frame(n0, n1):
    return codec.Frame(wire.RECOVERY, n0, struct.pack(">I", n1))


def decode_recovery(frame):
    """-> (n0, n1)"""
    _need(len(frame.payload) == 4, "recovery length")
    return frame.seq, struct.unpack(">I", frame.payload)[0]


# -- SUBSCRIBE / ACK / ERROR ----------------------------------------------------------------


def subscribe_frame(channels):
    chs = sorted(set(channels))
    if len(chs) > 255 or any(not 0 <= c <= 255 for c in chs):
        raise ValueError("channels are 0..255")
    return codec.Frame(wire.SUBSCRIBE, 0, bytes([len(chs)]) + bytes(chs))


def decode_subscribe(frame):
    p = frame.payload
    _need(len(p) >= 1 and len(p) == 1 + p[0], "subscribe length")
    return list(p[1:])


def ack_frame(number, status=STATUS_OK, channel=0):
    return codec.Frame(wire.ACK, number, struct.pack(">H", status), channel)


def decode_ack(frame):
    """-> (number, status)"""
    _need(len(frame.payload) == 2, "ack length")
    return frame.seq, struct.unpack(">H", frame.payload)[0]


def error_frame(code, text=""):
    return codec.Frame(wire.ERROR, 0, struct.pack(">H", code) + text.encode()[: wire.MAX_PAYLOAD - 2])


def decode_error(frame):
    _need(len(frame.payload) >= 2, "error length")
    try:
        text = bytes(frame.payload[2:]).decode()
    except UnicodeError:
        text = repr(bytes(frame.payload[2:]))
    return struct.unpack(">H", frame.payload[:2])[0], text
