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
#
# The device's answering rules, once (docs/protocol.md 5, 9): every frame a device receives goes
# through respond() -- firmware/lwagent.py on the boards, tools/simdevice.py's SimCore and
# VirtualRing on the host. Here and not in a module of its own: a module costs a board its object
# and 3 names for good (tests/firmware/test_qstr_budget.py). Sans-I/O: what is answered goes out
# through the caller's d(L, buf, size, a) (1 for a frame it dropped, else 0), a frame at a time.
#
# A link is a list, the firmware's link record (lwboot.link; the simulators make one of the same
# layout). The slots read here (the same `_NAME = const(n)` lines as lwagent's: test_records):
#   _TX     the answer buffer: the link's frame size (+ the auth trailer)
#   _HELLO  the device's HELLO frame, tag 0 (with auth its payload ends with 4 bytes for K)
#   _CB     a serial link's COBS buffer (max_encoded of _TX, + 1), or None: with auth off the
#           ring builds its answers there COBS-encoded and 0-terminated (EventRing.answer_cobs),
#           and hands d that buffer (d sends a frame in it as it is; any other, it encodes)
#   _EP     auth: lwauth.link's list of the endpoint's bound methods (verify, sign_into,
#           device_hello, device_sign_hello, rejects, epoch hi, epoch lo, endpoint, hint), or None
#   _LIM    the payload budget of an answer frame
#   _LASTP  messages.poll_key of the POLL this link answered last (-1: none)
#
# respond(L, b, n, a, ring, d): the frame in b[:n], which passed wire.check (the caller's: on a
# serial line StreamDecoder.scan's, on a datagram the caller's own), from a (UDP: the sender's
# address), on link L of a device whose ring is `ring`. The checks, in this order:
#   1. auth off: a signed frame (F_AUTH)                                   -> _R_BAD
#      auth on:  a signed HELLO request (OVERHEAD + AUTH_SIZE bytes): device_hello; forged or
#                unsigned (counted by the endpoint)                        -> _R_REFUSED
#                else a new session (or the same one: the same nonce), the last POLL
#                forgotten, the HELLO answered at once, signed with K      -> frames dropped
#                any other frame: verify; forged, replayed or unsigned (counted by the
#                endpoint), not answered; a link with no session yet sends its boot HELLO
#                (hint(): lwauth's, at most every 250 ms; 9.5)             -> _R_REFUSED
#                else the frame goes on as if unsigned (n - AUTH_SIZE)
#      (so a replayed POLL is refused by auth before the copy rule sees it)
#   2. POLL (POLL_SIZE, POLL_BURST_SIZE): a copy of the POLL this link answered last (the same
#      messages.poll_key)                                                  -> _R_COPY, not answered
#      else ring.respond (the burst, follow); max_frames not 1..32         -> _R_BAD, nothing sent
#      else it is now the POLL answered last                               -> frames dropped
#   3. HELLO request (OVERHEAD): the last POLL forgotten (a client starting: its POLLs are new,
#      whatever their tags), the HELLO answered with the request's tag    -> frames dropped
#   4. a POLL or a HELLO of another size                                   -> _R_BAD
#   5. anything else is the caller's (ACK, SUBSCRIBE: the push sessions)   -> _R_OTHER
#      (its unsigned size: n - AUTH_SIZE when b[1] has F_AUTH)
# Allocation: respond() 0 bytes for a POLL (answer_into runs with the heap locked: ring.respond)
# and a HELLO request, but what d and the endpoint allocate (with auth: the HMAC per frame,
# auth.py); hello() likewise.
from leadwire import wire
from leadwire._compat import const
from leadwire.bufcopy import copy_into
from leadwire.wire import put_header, seal

# results (negative: nothing answered); the firmware repeats these lines (test_records)
_R_BAD = const(-1)  # a bad request: the caller counts it (the agent: health's bad frames, an alarm)
_R_REFUSED = const(-2)  # refused by auth: counted by the endpoint
_R_COPY = const(-3)  # a copy of the POLL answered last: not answered again
_R_OTHER = const(-4)  # not the responder's: the caller's (ACK, SUBSCRIBE)
# a link's slots (lwagent's, lwboot's)
_TX = const(2)
_HELLO = const(11)
_CB = const(13)
_EP = const(15)
_LIM = const(16)
_LASTP = const(17)
# lwauth.link's list
_AVER = const(0)
_AHELLO = const(2)
_ASHELLO = const(3)
_AEH = const(5)
_AEL = const(6)
_AHINT = const(8)
# frames (wire: test_records checks the copies)
_TYPE_BITS = const(0x1F)
_AUTH_BIT = const(0x20)
_TAG_AT = const(3)
_OVERHEAD = const(12)
_AUTH_SIZE = const(8)
_POLL_SIZE = const(16)
_POLL_BURST_SIZE = const(17)
_HELLO_TYPE = const(1)  # wire.HELLO
_POLL_TYPE = const(2)  # wire.POLL


def respond(L, b, n, a, ring, d):
    """Answer the frame in b[:n] received on link L (see above); returns the frames dropped by d
    (>= 0) or _R_BAD, _R_REFUSED, _R_COPY, _R_OTHER."""
    t = b[0] & _TYPE_BITS
    A = L[_EP]
    if A is None:
        if b[1] & _AUTH_BIT:  # signed while auth is off: refused, a bad frame
            return _R_BAD
    elif t == _HELLO_TYPE and n == _OVERHEAD + _AUTH_SIZE:
        # a HELLO request: a new session, answered at once with the signed HELLO (K)
        if A[_AHELLO](b, n, A[_AEH], A[_AEL]):
            return _R_REFUSED
        L[_LASTP] = -1  # its POLLs are new, whatever their tags
        return hello(L, b[_TAG_AT], a, d)
    elif A[_AVER](b, n):
        # forged, replayed or unsigned: not answered; but a link with no session yet (a new boot)
        # says so with its boot HELLO, rate-limited
        if A[_AHINT]():
            hello(L, 0, a, d)
        return _R_REFUSED
    else:
        n -= _AUTH_SIZE  # the frame as if unsigned (the checks below use n)
    if t == _POLL_TYPE and (n == _POLL_SIZE or n == _POLL_BURST_SIZE):
        k = (b[_TAG_AT] << 16) | (b[8] << 8) | b[9]  # messages.poll_key: a small int (no alloc)
        if k == L[_LASTP]:
            return _R_COPY  # its answer went (docs/protocol.md 5)
        # (a serial link's unsigned frames built COBS-framed in its _CB: answer_cobs)
        n = ring.respond(b, n, L[_TX], L[_LIM], d, L, a, _CB if A is None else None)
        if n < 0:
            return _R_BAD  # max_frames not 1..32
        L[_LASTP] = k
        return n
    if t == _HELLO_TYPE and n == _OVERHEAD:
        L[_LASTP] = -1  # a client (re)starting: its POLLs are new, whatever their tags
        return hello(L, b[_TAG_AT], a, d)
    if t == _POLL_TYPE or t == _HELLO_TYPE:
        return _R_BAD
    return _R_OTHER


def hello(L, tag, a, d):
    """The device's HELLO answering a request with this tag (0: the boot HELLO), signed with auth
    (the session's K, or K = 0 before any: the boot HELLO), made in L[_TX] and handed to d;
    returns what d returns."""
    tx = L[_TX]
    h = L[_HELLO]
    m = len(h)
    copy_into(tx, 0, h, 0, m)
    m = retag(tx, m, tag)
    A = L[_EP]
    if A is not None:
        m = A[_ASHELLO](tx, m, A[_AEH], A[_AEL])
    return d(L, tx, m, a)


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


# On MicroPython where _viper loads, respond is _viper.respond: a POLL on a serial link without
# auth answered in one native call (the rules above, the same vectors); every other frame it hands
# to the bytecode respond above, `slow` (here and _viper's), the reference on every tier.
slow = respond
try:
    from leadwire import _viper
    from leadwire._viper import respond  # type: ignore[assignment]

    _viper.slow = slow  # type: ignore[assignment]
except (ImportError, SyntaxError, NotImplementedError, ValueError):  # CPython, no native emitter
    pass
