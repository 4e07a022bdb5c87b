# The host's end of frame authentication: what only a host does (the HELLO request, taking the
# device's HELLO answer, a key given as hex). auth.py holds the protocol both ends share and calls
# in here; a board never loads this module (every module a board loads costs heap: auth.py's
# device side is what the agent needs). Functions of an auth.Endpoint `ep` whose side is TO_DEVICE.
from leadwire import wire
from leadwire._compat import const
from leadwire.auth import AUTH_SIZE, HINT, KEY_MAX, KEY_MIN, TO_HOST

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


def sign_hello(ep, buf, n):
    """Sign the HELLO request in buf[:n] (its seq is the nonce H, fresh for each request; the
    host must draw it at random) in the zero context; the answer is expected under H."""
    if ep.prev is None:
        ep.prev = bytearray(4 * PENDING)
    if ep.live:
        ep._keep_old()
    elif ep.asked:  # the request before went unanswered: a late answer to it is stale, not forged
        for i in range(4 * PENDING - 1, 3, -1):
            ep.prev[i] = ep.prev[i - 4]
        for i in range(4):
            ep.prev[i] = ep.rx[5 + i]
        ep.n_prev = min(ep.n_prev + 1, PENDING)
    ep.asked = 1
    for i in range(4):
        ep.rx[5 + i] = buf[6 + i]
    ep.live = 0
    return ep._sign(buf, n, ep.zero, 0, 0, 0)


def hello(ep, buf, n):
    """A device's HELLO in buf[:n] (wire.check passed). wire.OK: the answer to our request
    (a new session: sign_into may be used now); HINT: a boot HELLO (right key, session 0:
    start a handshake); E_UNSIGNED / E_AUTH / E_REPLAY (counted)."""
    if not (buf[1] >> 4) & wire.F_AUTH:
        ep.unsigned += 1
        return wire.E_UNSIGNED
    p = n - wire.CRC_SIZE - AUTH_SIZE  # end of payload; the session K is its last 4 bytes
    if p - 4 < wire.HEADER_SIZE:
        ep.forged += 1
        return wire.E_AUTH
    k = buf[p - 4] | buf[p - 3] | buf[p - 2] | buf[p - 1]
    ctx = bytearray(13)
    ctx[0] = TO_HOST
    for i in range(4):
        ctx[1 + i] = buf[6 + i]  # E, from the frame
        if k:
            ctx[5 + i] = ep.rx[5 + i]  # H, ours
    c = (buf[p] << 8) | buf[p + 1]
    if not ep._tag_ok(ctx, buf, n, 0, c):
        if k and ep.has_old and ep._tag_ok(ep.old, buf, n, 0, c):
            ep.replayed += 1
            return wire.E_REPLAY
        for j in range(ep.n_prev if k else 0):
            for i in range(4):
                ctx[5 + i] = ep.prev[4 * j + i]
            if ep._tag_ok(ctx, buf, n, 0, c):
                ep.replayed += 1  # the late answer to a HELLO request we had sent again
                return wire.E_REPLAY
        ep.forged += 1
        return wire.E_AUTH
    if not k:
        return HINT
    if ep.live or c:
        ep.replayed += 1  # a second copy of the answer (duplicated on the way)
        return wire.E_REPLAY
    ep._session()
    for i in range(4):
        ep.rx[1 + i] = buf[6 + i]
        ep.tx[1 + i] = buf[6 + i]
        ep.tx[5 + i] = buf[p - 4 + i]
    return wire.OK
