# Payload layouts per frame type (the header is in wire.py). All integers big-endian.
#
#  HELLO     host->dev: empty payload = "send your HELLO".  dev->host: seq = boot epoch;
#            capacity u16, slot_size u16, frame_size u16, boots u16, then three short strings
#            (u8 length + UTF-8): board id, firmware version, board kind; signed HELLOs end with
#            the auth session K u32 (auth.py).  host->dev (signed): seq = the nonce H.
#  POLL      seq = n (client offset); max_events u16, max_bytes u16 (payload budget of each answer
#            frame)[, follow u1 << 7 | max_frames u7]: a burst -- up to max_frames (1..32) EVENTS
#            frames sent back to back, each going on from the last, numbered by the header's
#            fragment index (default 1); with follow set, a RECOVERY answer that leaves a frame of
#            the burst goes without F_LAST and the burst goes on with the events from n0
#  EVENTS    seq = offset of the first event (= s(n)); count u8, backlog u16 (events still queued
#            after this batch, saturated), then count records: channel u8, length u16, data.
#            Records hold consecutive offsets seq, s(seq), ...
#  NO_EVENT  seq = n; empty
#  RECOVERY  seq = n0 (oldest offset held); n1 u32 (newest offset held), boot epoch u32
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
    if not isinstance(payload, bytes):
        payload = bytes(payload)  # one copy; the records are then slices (bytes) of it
    count = payload[0]
    backlog = (payload[1] << 8) | payload[2]
    pos = BATCH_HEAD
    records = []  # type: list[tuple[int, bytes]]
    append = records.append
    for _ in range(count):
        end = pos + RECORD_HEAD
        if end > n:
            raise wire.WireError(wire.E_PAYLOAD, "record header")
        end += (payload[pos + 1] << 8) | payload[pos + 2]
        if end > n:
            raise wire.WireError(wire.E_PAYLOAD, "record data")
        append((payload[pos], payload[pos + RECORD_HEAD : end]))
        pos = end
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
        "session",
        "slot_size",
    )

    def __init__(
        self, boot_epoch, capacity, slot_size, frame_size, boots, board_id, firmware, board, session=None
    ):
        self.boot_epoch = boot_epoch
        self.capacity = capacity
        self.slot_size = slot_size
        self.frame_size = frame_size
        self.boots = boots
        self.board_id = board_id
        self.firmware = firmware
        self.board = board
        self.session = session  # signed HELLOs only: the auth session K (auth.py), 0 at boot

    def __eq__(self, other):
        return isinstance(other, Hello) and all(getattr(self, k) == getattr(other, k) for k in self.__slots__)

    def __repr__(self):
        return "Hello(%s)" % ", ".join("%s=%r" % (k, getattr(self, k)) for k in self.__slots__)


def hello_frame(h, tag=0):
    payload = (
        struct.pack(">HHHH", h.capacity, h.slot_size, h.frame_size, h.boots & 0xFFFF)
        + _short_str(h.board_id)
        + _short_str(h.firmware)
        + _short_str(h.board)
        + (b"" if h.session is None else struct.pack(">I", h.session))
    )
    return codec.Frame(wire.HELLO, h.boot_epoch, payload, message_id=tag)


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
    _need(pos == len(p) or pos + 4 == len(p), "hello trailing bytes")
    session = struct.unpack(">I", p[pos:])[0] if pos < len(p) else None
    return Hello(frame.seq, cap, slot, fsize, boots, strs[0], strs[1], strs[2], session)


def hello_request(tag=0):
    return codec.Frame(wire.HELLO, 0, b"", message_id=tag)


# -- POLL / answers ------------------------------------------------------------------------


POLL_FOLLOW = const(0x80)  # in a POLL's max_frames byte: go on past a RECOVERY (ring.answer_into)


def poll_frame(n, max_events=1, max_bytes=wire.MAX_PAYLOAD, tag=0, max_frames=1, follow=False):
    if not 1 <= max_frames <= wire.MAX_INDEX + 1:
        raise ValueError("max_frames must be 1..%d" % (wire.MAX_INDEX + 1))
    body = struct.pack(">HH", max_events, max_bytes)
    if max_frames > 1 or follow:
        body += bytes([max_frames | (POLL_FOLLOW if follow else 0)])
    return codec.Frame(wire.POLL, n, body, message_id=tag)


def poll_key(buf):
    """The tag and the low half of n of the POLL frame in buf, as one small int (< 2^24 on every
    port). A POLL with the key of the one a link answered last is a copy (the network's, or the
    client's second send on a lossy link, docs/protocol.md 5 and 6.5): the device does not answer it
    twice. A client never sends two different POLLs with one tag in a row, so no request is lost to
    it. (The firmware computes the same expression in place: a function here costs a board heap.)"""
    return (buf[3] << 16) | (buf[8] << 8) | buf[9]


def decode_poll(frame):
    """-> (n, max_events, max_bytes); a burst's max_frames is poll_frames(frame)"""
    poll_frames(frame)  # validates the length and max_frames
    me, mb = struct.unpack(">HH", frame.payload[:4])
    return frame.seq, me, mb


def poll_frames(frame):
    """How many answer frames a POLL asks for (a burst); 1 when the field is absent."""
    _need(len(frame.payload) in (4, 5), "poll length")
    if len(frame.payload) == 4:
        return 1
    k = frame.payload[4] & ~POLL_FOLLOW
    _need(1 <= k <= wire.MAX_INDEX + 1, "max_frames")
    return k


def poll_follow(frame):
    """Whether a POLL asks the device to go on past a RECOVERY in its burst (POLL_FOLLOW)."""
    poll_frames(frame)  # validates the length and max_frames
    return len(frame.payload) == 5 and bool(frame.payload[4] & POLL_FOLLOW)


def recovery_frame(n0, n1, epoch=0, tag=0):
    return codec.Frame(wire.RECOVERY, n0, struct.pack(">II", n1, epoch), message_id=tag)


def decode_recovery(frame):
    """-> (n0, n1)"""
    _need(len(frame.payload) == 8, "recovery length")
    return frame.seq, struct.unpack(">I", frame.payload[:4])[0]


def recovery_epoch(frame):
    """The boot epoch of the ring that sent this RECOVERY."""
    _need(len(frame.payload) == 8, "recovery length")
    return struct.unpack(">I", frame.payload[4:])[0]


# -- SUBSCRIBE / ACK / ERROR ----------------------------------------------------------------


def subscribe_frame(channels, tag=0):
    chs = sorted(set(channels))
    if len(chs) > 255 or any(not 0 <= c <= 255 for c in chs):
        raise ValueError("channels are 0..255")
    return codec.Frame(wire.SUBSCRIBE, 0, bytes([len(chs)]) + bytes(chs), message_id=tag)


def decode_subscribe(frame):
    p = frame.payload
    _need(len(p) >= 1 and len(p) == 1 + p[0], "subscribe length")
    return list(p[1:])


def ack_frame(number, status=STATUS_OK, channel=0, tag=0):
    return codec.Frame(wire.ACK, number, struct.pack(">H", status), channel, message_id=tag)


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


# -- channel payloads written by the device agent (layouts in device.py) --------------------

HEALTH_FIELDS = (
    "boots",
    "reset_cause",
    "uptime_s",
    "heap_free",
    "heap_min",
    "overruns",
    "dropped",
    "bad_frames",
)


def decode_sample(data):
    """Synthetic sensor sample -> (sample number mod 2^16, size)."""
    _need(len(data) >= 2, "sample length")
    return (data[0] << 8) | data[1], len(data)


ALARM_BAD_FRAME = 1  # value: bad frames received so far
ALARM_PERIODIC = 2  # synthetic alarm source; value: alarms raised so far
HEALTH_SIZE = 16
# a board with auth on follows each health record with its auth rejects on the health
# channel: forged u16, replayed u16, unsigned u16 (saturated), a record of its own (6 bytes) so
# that it fits any ring slot (8 and up) and the 16-byte health record is unchanged
HEALTH_AUTH_FIELDS = ("auth_forged", "auth_replayed", "auth_unsigned")
HEALTH_AUTH_SIZE = 6
HEALTH_TASKS_SIZE = 2  # restarts u16: after the health record once a task has been restarted


def decode_alarm(data):
    """Alarm record -> (code, value); codes are ALARM_*."""
    _need(len(data) == 5, "alarm length")
    return data[0], struct.unpack(">I", bytes(data[1:5]))[0]


def heap_bytes(v):
    """A health record's heap field (h16) -> bytes: exact below 32,768, else 256-byte units."""
    return v if v < 0x8000 else (v & 0x7FFF) << 8


def decode_health(data):
    """Health record -> dict of HEALTH_FIELDS (layout in device.py: boots mod 4096, heap h16,
    the other u16 saturated)."""
    _need(len(data) == HEALTH_SIZE, "health length")
    up, bc, free, low, over, dropped, bad = struct.unpack(">IHHHHHH", bytes(data))
    free, low = heap_bytes(free), heap_bytes(low)
    return dict(zip(HEALTH_FIELDS, (bc >> 4, bc & 0xF, up, free, low, over, dropped, bad)))


def decode_health_tasks(data):
    """The tasks record a board sends after its health record once a task has failed and been
    restarted (firmware/lwagent.py's supervisor) -> {"restarts": n} (u16, saturated)."""
    _need(len(data) == HEALTH_TASKS_SIZE, "health tasks length")
    return {"restarts": (data[0] << 8) | data[1]}


def decode_health_auth(data):
    """The auth record that follows a health record (auth on) -> dict of HEALTH_AUTH_FIELDS."""
    _need(len(data) == HEALTH_AUTH_SIZE, "health auth length")
    return dict(zip(HEALTH_AUTH_FIELDS, struct.unpack(">HHH", bytes(data))))
