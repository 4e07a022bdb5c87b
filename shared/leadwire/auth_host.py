# The host's end of frame authentication: what only a host does (the HELLO request, taking the
# device's HELLO answer, a key given as hex), as HostEndpoint, a subclass of auth.Endpoint. auth.py
# holds the protocol both ends share and the device's end and knows nothing of this module; a board
# never loads it (every module a board loads costs heap), nor pays for the host-only state below.
from leadwire import u32, wire
from leadwire._compat import const
from leadwire.auth import HINT, KEY_MAX, KEY_MIN, TO_DEVICE, TO_HOST, Endpoint
from leadwire.wire import AUTH_SIZE

PENDING = const(4)  # a late answer to one of the last PENDING unanswered HELLO requests is stale


def parse_key(text):
    """A key given as hex (32..128 digits: 16..64 bytes) -> bytes; ValueError naming the problem,
    never the key."""
    t = text.strip() if isinstance(text, str) else ""
    if len(t) % 2 or not KEY_MIN * 2 <= len(t) <= KEY_MAX * 2:
        raise ValueError("a key is 32..128 hex digits (16..64 bytes)")
    if t.lstrip("0123456789abcdefABCDEF"):  # int(.., 16) alone takes "+f" (a board refuses it)
        raise ValueError("a key is hex digits only")
    try:
        return bytes(int(t[i : i + 2], 16) for i in range(0, len(t), 2))
    except ValueError:
        raise ValueError("a key is hex digits only")


class HostEndpoint(Endpoint):
    """The host's end of an authenticated link (side TO_DEVICE): auth.Endpoint plus the HELLO
    request and the taking of its answer."""

    def __init__(self, key, side=TO_DEVICE):
        Endpoint.__init__(self, key, side)
        self.prev = bytearray(4 * PENDING)  # nonces of unanswered HELLO requests before the last
        self.asked = 0  # a HELLO request is out (its nonce in rx)
        self.n_prev = 0  # how many of them (the newest first)

    def host_sign_hello(self, buf, n):
        """Sign the HELLO request in buf[:n] (its seq is the nonce H, fresh for each request; the
        host must draw it at random) in the zero context; the answer is expected under H."""
        if self.live:
            self._keep_old()
        elif self.asked:  # the request before went unanswered: a late answer to it is stale, not forged
            for i in range(4 * PENDING - 1, 3, -1):
                self.prev[i] = self.prev[i - 4]
            for i in range(4):
                self.prev[i] = self.rx[5 + i]
            self.n_prev = min(self.n_prev + 1, PENDING)
        self.asked = 1
        for i in range(4):
            self.rx[5 + i] = buf[6 + i]
        self.live = 0
        return self._sign(buf, n, self.zero, 0, 0, 0)

    def host_hello(self, buf, n):
        """A device's HELLO in buf[:n] (wire.check passed). wire.OK: the answer to our request
        (a new session: sign_into may be used now); HINT: a boot HELLO (right key, session 0:
        start a handshake); E_UNSIGNED / E_AUTH / E_REPLAY (counted)."""
        if not (buf[1] >> 4) & wire.F_AUTH:
            self.unsigned += 1
            return wire.E_UNSIGNED
        p = n - wire.CRC_SIZE - AUTH_SIZE  # end of payload; the session K is its last 4 bytes
        if p - 4 < wire.HEADER_SIZE:
            self.forged += 1
            return wire.E_AUTH
        k = buf[p - 4] | buf[p - 3] | buf[p - 2] | buf[p - 1]
        ctx = bytearray(13)
        ctx[0] = TO_HOST
        for i in range(4):
            ctx[1 + i] = buf[6 + i]  # E, from the frame
            if k:
                ctx[5 + i] = self.rx[5 + i]  # H, ours
        c = (buf[p] << 8) | buf[p + 1]
        if not self._tag_ok(ctx, buf, n, 0, c):
            if k and self.has_old and self._tag_ok(self.old, buf, n, 0, c):
                self.replayed += 1
                return wire.E_REPLAY
            for j in range(self.n_prev if k else 0):
                for i in range(4):
                    ctx[5 + i] = self.prev[4 * j + i]
                if self._tag_ok(ctx, buf, n, 0, c):
                    self.replayed += 1  # the late answer to a HELLO request we had sent again
                    return wire.E_REPLAY
            self.forged += 1
            return wire.E_AUTH
        if not k:
            return HINT
        if self.live or c:
            self.replayed += 1  # a second copy of the answer (duplicated on the way)
            return wire.E_REPLAY
        self._session()
        for i in range(4):
            self.rx[1 + i] = buf[6 + i]
            self.tx[1 + i] = buf[6 + i]
            self.tx[5 + i] = buf[p - 4 + i]
        return wire.OK

    def newer_session(self, buf, n):
        """True when the device HELLO in buf[:n] (signed, checked) carries a session K after ours in
        serial-number order: a late copy of one of our older HELLO requests reached the device, which
        moved on to a session under that old nonce; only a new handshake gets its frames again.
        (Copies of older answers carry older K.) Allocates the two u32 ints on 32-bit ports."""
        if not self.live:
            return False
        p = n - wire.CRC_SIZE - AUTH_SIZE
        k = (buf[p - 4] << 24) | (buf[p - 3] << 16) | (buf[p - 2] << 8) | buf[p - 1]
        t = self.tx
        return 0 < u32.diff(k, (t[5] << 24) | (t[6] << 16) | (t[7] << 8) | t[8])
