# Frame authentication (sans-I/O; the same code on the device and the host).
#
# A signed frame has the flag F_AUTH and an 8-byte trailer between its payload and its CRC:
#
#   header (10) | payload | counter low u16 | tag (6) | CRC-16 (2)      20 bytes of overhead
#
#   tag = HMAC-SHA256(key, context | header | payload)[:6]
#   context = direction u8 (0 host -> device, 1 device -> host) | boot epoch u32 | session u32 |
#             counter u32                                              (13 bytes, all big-endian)
#
# The CRC still covers everything, so line noise is counted as a CRC error, not as a forgery.
# The length field stays the payload length; wire.check() accounts for the trailer.
#
# Sessions. The device's boot epoch E (random per boot) and two session values make every context
# fresh, so a frame can be accepted only in the session it was made for:
#   1. The host sends HELLO(seq = H), H a random nonce, signed in the zero context (0, 0, 0). It is
#      replayable by design: all it can make a device do is start a new session and answer.
#   2. The device starts session K (its per-boot count of accepted HELLO requests, from 1), resets
#      both counters, and answers HELLO(seq = E) whose payload ends with K (u32), signed with counter
#      0 in context (1, E, H). The host accepts it only under the nonce it just sent: an old HELLO
#      answer (another boot, another handshake) fails.
#   3. Then the host signs in context (0, E, K) with counters 1, 2, ...; the device in (1, E, H) with
#      counters 1, 2, ... A frame of an older session or boot fails its tag; within a session a
#      counter is accepted once, and at most WINDOW behind the highest seen (reordering), so a
#      replayed poll, ACK, SUBSCRIBE or answer is refused.
#   A HELLO answer that comes after the host asked again (a new nonce) is stale, not forged: the host
#   keeps the nonces of its last PENDING unanswered requests for that (E_REPLAY), and the previous
#   session's context for late frames of that session.
#   The HELLO a device sends at boot, before any handshake, is signed in (1, E, 0) with K = 0: the
#   host takes it only as a hint to start a handshake (it is replayable).
# Only the low 16 bits of a counter travel; the receiver takes the 32-bit value nearest its highest.
# A resent report (spec 003: "identical") is identical above this layer: the trailer is per
# transmission, or the replay window would refuse the resend.
#
# Allocation: none for the context and counters (bytearrays updated in place, 16-bit halves); the
# tag allocates per frame: two sha256 objects, their digests and a memoryview slice (~300 bytes on a
# 64-bit port), per frame, never per event.
try:
    from hashlib import sha256
except ImportError:  # pragma: no cover - old MicroPython ports
    from uhashlib import sha256  # type: ignore

from leadwire import wire
from leadwire._compat import const
from leadwire.wire import AUTH_SIZE  # the trailer of a signed frame: defined once, in wire

TAG_SIZE = const(6)
WINDOW = const(16)  # a counter up to this far behind the highest is still accepted, once
TO_DEVICE = const(0)
TO_HOST = const(1)
KEY_MIN = const(16)
KEY_MAX = const(64)

# what accept() found (besides wire.OK / E_AUTH / E_REPLAY / E_UNSIGNED)
HINT = const(-1)  # a device's boot HELLO: proof of the key, not of freshness (ask for a HELLO)


class Key:
    """HMAC-SHA256 with the pads made once. Never printed: repr() hides it."""

    def __init__(self, key):
        if len(key) > 64:
            key = sha256(key).digest()
        k = bytearray(64)
        k[: len(key)] = key
        self._i = bytes(b ^ 0x36 for b in k)
        self._o = bytes(b ^ 0x5C for b in k)

    def __repr__(self):
        return "Key(...)"

    def tag(self, ctx, buf, end):
        """The first TAG_SIZE bytes of HMAC(key, ctx | buf[:end]) (allocates: see above)."""
        h = sha256(self._i)
        h.update(ctx)
        h.update(memoryview(buf)[:end])
        h2 = sha256(self._o)
        h2.update(h.digest())
        return h2.digest()


def _put32(b, at, hi, lo):
    b[at] = hi >> 8
    b[at + 1] = hi & 0xFF
    b[at + 2] = lo >> 8
    b[at + 3] = lo & 0xFF


def _same(buf, at, d):
    # constant time over the TAG_SIZE bytes
    x = 0
    for i in range(TAG_SIZE):
        x |= buf[at + i] ^ d[i]
    return x == 0


class Endpoint:
    """One end of an authenticated link: what both ends do, and the device's end (side TO_HOST).
    The host's end (side TO_DEVICE) extends it with the HELLO request (a separate module a board
    never loads, built on this one).

    Holds both contexts, the send counter, the receive window and the reject counters; frames are
    signed and checked in place in the caller's buffers.
    """

    def __init__(self, key, side):
        self.key = key if isinstance(key, Key) else Key(key)
        self.side = side
        self.tx = bytearray(13)  # context of what this end sends
        self.rx = bytearray(13)  # context of what it receives
        self.old = bytearray(13)  # the previous session's receive context (a late frame is stale)
        self.tx[0] = side
        self.rx[0] = 1 - side
        self.old[0] = 1 - side
        self.zero = bytearray(13)  # HELLO requests: (0, 0, 0)
        self.boot = bytearray(13)  # the device's boot HELLO: (1, E, 0)
        self.boot[0] = TO_HOST
        self.has_old = 0
        self.old_hi = 0  # the previous session's highest counter
        self.old_lo = 0
        self.send_hi = 0
        self.send_lo = 0
        self.hi = 0  # highest counter received (halves)
        self.lo = 0
        self.seen = 0  # bit i: counter highest - 1 - i received
        self.live = 0  # a session is established
        self.k_hi = 0  # device: sessions started in this boot
        self.k_lo = 0
        self.forged = 0  # bad tag (wrong key, forged, no session)
        self.replayed = 0  # counter already seen or too old, or a frame of an older session
        self.unsigned = 0  # no F_AUTH where auth is required

    # -- both ends --------------------------------------------------------------------------------

    def sign_into(self, buf, n):
        """Sign the unsigned frame in buf[:n] (header, payload, CRC) in place: set F_AUTH, put the
        trailer where the CRC was, seal again. buf needs AUTH_SIZE spare bytes. Returns n + 8."""
        return self._sign(buf, n, self.tx, self.send_hi, self.send_lo, 1)

    def _sign(self, buf, n, ctx, hi, lo, step):
        buf[1] |= wire.F_AUTH << 4
        p = n - wire.CRC_SIZE
        _put32(ctx, 9, hi, lo)
        buf[p] = lo >> 8
        buf[p + 1] = lo & 0xFF
        d = self.key.tag(ctx, buf, p)
        for i in range(TAG_SIZE):
            buf[p + 2 + i] = d[i]
        if step:
            lo += 1
            self.send_lo = lo & 0xFFFF
            self.send_hi = (hi + (lo >> 16)) & 0xFFFF
        return wire.seal(buf, p + AUTH_SIZE - wire.HEADER_SIZE)

    def _tag_ok(self, ctx, buf, n, hi, lo):
        p = n - wire.CRC_SIZE - AUTH_SIZE
        _put32(ctx, 9, hi, lo)
        return _same(buf, p + 2, self.key.tag(ctx, buf, p))

    def verify(self, buf, n):
        """A frame of the current session in buf[:n] (wire.check passed): wire.OK, E_UNSIGNED,
        E_AUTH or E_REPLAY; counted. The window moves only for a frame whose tag is right."""
        if not (buf[1] >> 4) & wire.F_AUTH:
            self.unsigned += 1
            return wire.E_UNSIGNED
        p = n - wire.CRC_SIZE - AUTH_SIZE
        c = (buf[p] << 8) | buf[p + 1]
        d = (c - self.lo) & 0xFFFF
        if d < 0x8000:  # ahead (d > 0) or the highest itself (d == 0)
            lo = self.lo + d
            hi = (self.hi + (lo >> 16)) & 0xFFFF
            lo &= 0xFFFF
        else:
            b = 0x10000 - d
            lo = self.lo - b
            hi = (self.hi - (1 if lo < 0 else 0)) & 0xFFFF
            lo &= 0xFFFF
        if not self.live or not self._tag_ok(self.rx, buf, n, hi, lo):
            if self.has_old and self._stale(buf, n, c):
                self.replayed += 1  # a late frame of the session before (a handshake overtook it)
                return wire.E_REPLAY
            self.forged += 1
            return wire.E_AUTH
        if d == 0:
            self.replayed += 1
            return wire.E_REPLAY
        if d < 0x8000:
            self.seen = ((self.seen << d) | (1 << (d - 1))) & 0xFFFF if d <= WINDOW else 0
            self.hi = hi
            self.lo = lo
            return wire.OK
        if b > WINDOW or self.seen & (1 << (b - 1)):
            self.replayed += 1
            return wire.E_REPLAY
        self.seen |= 1 << (b - 1)
        return wire.OK

    def _stale(self, buf, n, c):
        # a frame of the previous session: its counter taken near that session's highest
        d = (c - self.old_lo) & 0xFFFF
        lo = self.old_lo + (d if d < 0x8000 else d - 0x10000)
        hi = (self.old_hi + (1 if lo > 0xFFFF else -1 if lo < 0 else 0)) & 0xFFFF
        return self._tag_ok(self.old, buf, n, hi, lo & 0xFFFF)

    def _keep_old(self):
        for i in range(13):
            self.old[i] = self.rx[i]
        self.old_hi = self.hi
        self.old_lo = self.lo
        self.has_old = 1

    def _session(self):
        # a new session: counters reset; the receive window starts at 0 (the HELLO answer's)
        self.send_hi = 0
        self.send_lo = 0 if self.side == TO_HOST else 1
        self.hi = self.lo = self.seen = 0
        self.live = 1

    # -- the device's end -------------------------------------------------------------------------

    def device_hello(self, buf, n, epoch_hi, epoch_lo):
        """A HELLO request in buf[:n] (wire.check passed): check it in the zero context; if right,
        start a new session (K + 1) under its nonce; the request of the current session again
        (a duplicate: same nonce) keeps the session. Returns wire.OK (then answer with
        device_sign_hello at once), or E_UNSIGNED / E_AUTH (counted)."""
        if not (buf[1] >> 4) & wire.F_AUTH:
            self.unsigned += 1
            return wire.E_UNSIGNED
        if not self._tag_ok(self.zero, buf, n, 0, (buf[n - 10] << 8) | buf[n - 9]):
            self.forged += 1
            return wire.E_AUTH
        if self.live and self._same_nonce(buf):
            return wire.OK  # the same request again (duplicated on the way): same session, answered again
        lo = self.k_lo + 1
        self.k_hi = (self.k_hi + (lo >> 16)) & 0xFFFF
        self.k_lo = lo & 0xFFFF
        if self.live:
            self._keep_old()
        self._session()
        _put32(self.tx, 1, epoch_hi, epoch_lo)
        for i in range(4):
            self.tx[5 + i] = buf[6 + i]  # H
        _put32(self.rx, 1, epoch_hi, epoch_lo)
        _put32(self.rx, 5, self.k_hi, self.k_lo)
        return wire.OK

    def _same_nonce(self, buf):
        for i in range(4):
            if buf[6 + i] != self.tx[5 + i]:
                return False
        return True

    def device_sign_hello(self, buf, n, epoch_hi, epoch_lo):
        """Sign the device's HELLO in buf[:n], whose payload ends with 4 bytes for the session K:
        after device_hello, the answer (counter 0 of session K); with no session yet, the boot
        HELLO (K = 0, context (1, E, 0)). Returns n + 8."""
        p = n - wire.CRC_SIZE
        if self.live:
            _put32(buf, p - 4, self.k_hi, self.k_lo)
            m = self._sign(buf, n, self.tx, 0, 0, 0)  # counter 0, however often it is answered
            if not (self.send_hi or self.send_lo):
                self.send_lo = 1
            return m
        _put32(buf, p - 4, 0, 0)
        _put32(self.boot, 1, epoch_hi, epoch_lo)
        return self._sign(buf, n, self.boot, 0, 0, 0)
