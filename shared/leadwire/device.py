# Payload layouts the device agent writes and reads in place (firmware/ calls these; the host
# reads and writes the same layouts through messages.py). Kept apart from messages.py because every
# module a board loads costs heap: this one is small, and its argument names reuse names the other
# core modules already have (each new name is a qstr: ~30 bytes on a 64-bit port).
#
#  HELLO     capacity u16, slot_size u16, frame_size u16, boots u16, then board id, firmware
#            version, board kind (u8 length + UTF-8 each)[, auth session K u32 (signed HELLOs:
#            auth.Endpoint.device_sign_hello fills it in)]            hello_into (boot; allocates)
#  POLL      max_events u16, max_bytes u16                            u16(buf, 0), u16(buf, 1)
#            a copy of the POLL answered last (same messages.poll_key) is not answered again
#  ACK       status u16                                               u16(buf, 0), ack_into
#  answers   echo the request's tag (message id byte; ring.answer_into does it for polls) retag
#  SUBSCRIBE count u8, channel ids                                    subscribe_channels (allocates)
#  NOTIFY    a FrameQueue fragment of a report body                   fragment_into
#  report    count u8, backlog u16 (0), records: channel u8, length u16, data (the EVENTS batch
#            layout): record_into, records_drop, report_body (allocates)
#
# Channel payloads (application data carried in event records; messages.decode_* read them):
#  sample    sample number u16 (wraps), then filler up to the configured size     sample_into
#  alarm     code u8 (messages.ALARM_*), value u32                              alarm_into
#  health    16 bytes: uptime s u32, boots u12 << 4 | reset cause u4, heap free h16, heap
#            low-water h16, ring overruns u16, frames dropped u16, bad frames received u16
#            (boots wraps at 4096; the u16 values saturate at 65535; h16: bytes below 32,768,
#            else 0x8000 | bytes >> 8 (256-byte units, saturating at 8,388,352))  health_into
#  auth      with auth on, after each health record on its channel: rejects forged u16,
#            replayed u16, unsigned u16 (6 bytes, saturated)                health_into
#  tasks     after a health record once a task has failed: restarts u16 (2 bytes, saturated)
#                                                                           health_into
#
# Allocation: none, except where marked (boot and control path).
from leadwire import wire
from leadwire.bufcopy import copy_into
from leadwire.wire import put_header, seal


def u16(buf, n):
    """The n-th big-endian u16 of the payload of the frame in buf."""
    n = 10 + 2 * n
    return (buf[n] << 8) | buf[n + 1]


def _u32(buf, n, data):
    buf[n] = (data >> 24) & 0xFF
    buf[n + 1] = (data >> 16) & 0xFF
    buf[n + 2] = (data >> 8) & 0xFF
    buf[n + 3] = data & 0xFF


def hello_into(buf, epoch, capacity, slot_size, frame_size, boots, payload, length=0):
    """The device's HELLO (seq = boot epoch) in buf; payload = (board id, firmware, board kind),
    then `length` zero bytes (4 with auth on: the session K, written when it is signed). Returns
    the frame size. Boot time: allocates."""
    n = 10
    for v in (capacity, slot_size, frame_size, boots & 0xFFFF):
        buf[n] = v >> 8
        buf[n + 1] = v & 0xFF
        n += 2
    for s in payload:
        b = s.encode()[:255]
        buf[n] = len(b)
        buf[n + 1 : n + 1 + len(b)] = b
        n += 1 + len(b)
    for _ in range(length):
        buf[n] = 0
        n += 1
    put_header(buf, wire.HELLO, wire.F_LAST, 0, 0, 0, 0, n - 10, epoch >> 16, epoch & 0xFFFF)
    return seal(buf, n - 10)


def retag(buf, n, message_id):
    """Set the tag (message id) of the frame in buf[:n] and seal it again: a prepared answer
    (the HELLO) echoing a request's tag. Returns n."""
    buf[3] = message_id
    return seal(buf, n - wire.OVERHEAD)


def subscribe_channels(buf, n):
    """Channel ids of the SUBSCRIBE frame in buf[:n] (bytes), or None if malformed. Allocates."""
    if n < 13 or buf[10] != n - 13:
        return None
    return bytes(buf[11 : n - 2])


def ack_into(buf, channel, message_id, hi, lo, status):
    """ACK(seq = hi, lo; status); message_id echoes the request's tag (ACK of SUBSCRIBE)."""
    put_header(buf, wire.ACK, wire.F_LAST, 0, channel, message_id, 0, 2, hi, lo)
    buf[10] = status >> 8
    buf[11] = status & 0xFF
    return seal(buf, 2)


def fragment_into(buf, channel, hi, lo, frame):
    """A frames.Frame as a NOTIFY fragment (seq = MessageNumber as hi, lo) or, for a close request,
    CLOSE (channel 0, seq 0, the close priority). Returns the frame size."""
    data = frame.data
    n = len(data)
    if frame.is_close:
        put_header(buf, wire.CLOSE, wire.F_LAST, frame.priority, 0, frame.message_id, 0, 0, 0, 0)
        return seal(buf, 0)
    last = wire.F_LAST if frame.last else 0
    put_header(buf, wire.NOTIFY, last, frame.priority, channel, frame.message_id, frame.index, n, hi, lo)
    copy_into(buf, 10, data, 0, n)
    return seal(buf, n)


def record_into(buf, pos, channel, data, n):
    """Append a record (data[:n]) to the report body in buf ending at pos; returns the new end, or
    -1 when it does not fit (255 records, or no room). A new body: bytearray(size), end 3."""
    c = buf[0]
    if c == 255 or pos + 3 + n > len(buf):
        return -1
    buf[pos] = channel
    buf[pos + 1] = n >> 8
    buf[pos + 2] = n & 0xFF
    copy_into(buf, pos + 3, data, 0, n)
    buf[0] = c + 1
    return pos + 3 + n


def _skip(buf, n):
    # end of the first n records
    pos = 3
    while n > 0:
        pos += 3 + ((buf[pos + 1] << 8) | buf[pos + 2])
        n -= 1
    return pos


def records_drop(buf, pos, n):
    """Remove the first n records of the body in buf ending at pos (delivered); returns the new end."""
    p = _skip(buf, n)
    copy_into(buf, 3, buf, p, pos - p)
    buf[0] -= n
    return 3 + pos - p


def report_body(buf, n):
    """The first n records of the body in buf as a report of their own (bytes). Allocates the
    report once (a 1 KB body with 10 KB free: every extra copy fragments the heap)."""
    c = buf[0]
    buf[0] = n
    out = bytes(memoryview(buf)[: _skip(buf, n)])
    buf[0] = c
    return out


def sample_into(buf, n):
    """Sample number n (mod 2^16) into the first two bytes of a sample payload."""
    buf[0] = (n >> 8) & 0xFF
    buf[1] = n & 0xFF


def alarm_into(buf, status, data):
    """Alarm record: code `status` u8, value `data` u32 (below 2^30 on the device); returns 5."""
    buf[0] = status
    _u32(buf, 1, data)
    return 5


def health_into(buf, data, n=1, count=3):
    """Health record from the list `data` = [boots, reset cause, uptime s, heap free, heap
    low-water, ring overruns, frames dropped, bad frames, ...] (ints below 2^30); returns 16.
    n > 1: a record of `count` u16 values from data[n:n + count] instead (firmware/lwagent.py:
    the tasks record, n = 11, count 1: restarts; the auth record, n = 12: forged, replayed,
    unsigned); returns 2 * count."""
    if n > 1:
        pos = 0
        for n in range(n, n + count):
            v = data[n] if data[n] < 0xFFFF else 0xFFFF
            buf[pos] = v >> 8
            buf[pos + 1] = v & 0xFF
            pos += 2
        return pos
    _u32(buf, 0, data[2])
    v = ((data[0] & 0xFFF) << 4) | (data[1] & 0xF)
    pos = 4
    for n in range(1, 8):
        if n > 2:
            v = data[n]
            if n < 5 and v > 0x7FFF:  # heap bytes (h16): 256-byte units above 32 KB
                v = 0x8000 | min(v >> 8, 0x7FFF)
            elif v > 0xFFFF:
                v = 0xFFFF
        if n != 2:
            buf[pos] = v >> 8
            buf[pos + 1] = v & 0xFF
            pos += 2
    return pos
