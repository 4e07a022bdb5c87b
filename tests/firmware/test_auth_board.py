"""Authentication on real virtual boards: the firmware on MicroPython, driven by a small
CPython client whose end of the link is the core's auth_host.HostEndpoint(key) (tools/authclient.py).

Host -> device: forged, wrong-key, unsigned, replayed (poll, SUBSCRIBE, ACK: the same bytes sent
again), old-session and old-boot frames are refused, not answered, and counted in the board's
health (the 6-byte auth record after each health record) with exact counts. Device -> host: the
board's frames are all signed (poll answers, each frame of a burst, HELLO answers with the
session, the boot HELLO, ACKs, NOTIFY fragments and their resends), and a replayed or forged
board frame is refused by the host's endpoint. `"auth": false` boards answer unsigned frames and
refuse signed ones; a board without key or auth says so and is not ready; the key is never on the
console."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from leadwire import auth, auth_host, codec, messages, wire
from leadwire.tools.authclient import POLL_ANSWERS, AuthClient
from leadwire.tools.board import BoardError, start_board
from leadwire.tools.wireclient import SerialLink, UdpLink

pytestmark = [pytest.mark.micropython, pytest.mark.timeout(90)]

HEALTH_MS = 200
CFG = {
    "health": {"ms": HEALTH_MS},
    "sensors": [{"ch": 1, "hz": 20, "size": 8}],
    "report": {"ms": 100, "timeout": 300},
}
OTHER_KEY = bytes(range(32))


def _poll(c: AuthClient, n: int = 0) -> codec.Frame:
    return messages.poll_frame(n, 1, 100, tag=c.next_tag())


def _none_of(c: AuthClient, types: tuple[int, ...], wait: float = 0.6) -> None:
    """Nothing of `types` arrives within `wait` (other frames, e.g. NOTIFY, may)."""
    got = []
    for data in c.quiet(wait):
        if data[0] & 0x1F in types:
            got.append(codec.decode(data))
    assert got == [], got


def _wait_auth_record(c: AuthClient, want: dict[str, int], timeout: float = 5.0) -> dict[str, int] | None:
    # the latest auth record, once one made after the rejects is in the ring (health every 200 ms)
    end = time.monotonic() + timeout
    got = None
    while time.monotonic() < end:
        time.sleep(2.5 * HEALTH_MS / 1000)
        got = c.auth_health()
        if got == want:
            return got
    return got


def _reseal(data: bytes, flip_at: int) -> bytes:
    # one byte changed, the CRC made right again: a forgery, not line noise
    b = bytearray(data)
    b[flip_at] ^= 0x01
    wire.seal(b, len(b) - wire.OVERHEAD)
    return bytes(b)


def test_handshake_polls_bursts_signed_and_the_host_refuses_replays(tmp_path: Path) -> None:
    with start_board("udp", key="auto", config=CFG, board_dir=tmp_path) as b:
        assert b.address is not None and b.key is not None
        c = AuthClient(UdpLink(b.address), b.key)
        try:
            h = c.handshake()
            assert (h.session, h.board, h.boots) == (1, "unix", 1)
            f = c.poll(0, 1)
            assert f.type in POLL_ANSWERS and c.raw[-1][1] & 0x20  # F_AUTH on the wire
            assert len(c.raw[-1]) == wire.OVERHEAD + len(f.payload) + auth.AUTH_SIZE
            # a burst: every frame signed, each verified in turn (counters 1, 2, ...)
            time.sleep(1.0)  # ~20 events
            recs = c.records()
            assert len(recs) >= 15
            n0 = len(c.raw)
            c.send(c.sign(messages.poll_frame(0, 1, 100, tag=c.next_tag())))
            first = c.recv(2.0, POLL_ANSWERS)
            assert first is not None and first.type == wire.RECOVERY
            n = (messages.decode_recovery(first)[0] - 1) & 0xFFFFFFFF
            c.send(c.sign(messages.poll_frame(n, 3, 40, tag=c.next_tag(), max_frames=4)))
            burst = [c.recv(2.0, POLL_ANSWERS) for _ in range(4)]
            assert [f.type for f in burst if f] == [wire.EVENTS] * 4
            assert [f.index for f in burst if f] == [0, 1, 2, 3]
            assert len(c.raw) - n0 == 5 and c.rejected == []
            # device -> host: the same answer again is a replay, a changed one a forgery
            last = bytearray(c.raw[-1])
            assert c.ep.verify(last, len(last)) == wire.E_REPLAY and c.ep.replayed == 1
            forged = bytearray(_reseal(c.raw[-1], len(last) - 4))
            assert c.ep.verify(forged, len(forged)) == wire.E_AUTH and c.ep.forged == 1
            # a new handshake: session 2; an answer of session 1 is now stale
            assert c.handshake().session == 2
            assert c.ep.verify(last, len(last)) == wire.E_REPLAY and c.ep.replayed == 2
            assert c.poll(0, 1).type in POLL_ANSWERS
        finally:
            c.close()
        # the key is a secret: never on the console
        log = (tmp_path / "console.log").read_text()
        assert "auth on" in log and b.key not in log and b.key.upper() not in log


def test_every_refused_frame_is_counted_exactly(tmp_path: Path) -> None:
    with start_board("udp", key="auto", config=CFG, board_dir=tmp_path) as b:
        assert b.address is not None and b.key is not None
        c = AuthClient(UdpLink(b.address), b.key)
        want = {"auth_forged": 0, "auth_replayed": 0, "auth_unsigned": 0}
        try:
            assert c.handshake().session == 1
            # forged: a right poll with one tag byte changed (CRC right)
            c.send(_reseal(c.sign(_poll(c)), -3))
            _none_of(c, POLL_ANSWERS)
            want["auth_forged"] += 1
            # wrong key: a HELLO request, and a poll in the right session and counter
            c.send(c.hello_request(auth_host.HostEndpoint(OTHER_KEY)))
            _none_of(c, (wire.HELLO,))
            c.send(c.sign(_poll(c), c.with_key(OTHER_KEY)))
            _none_of(c, POLL_ANSWERS)
            want["auth_forged"] += 2
            # unsigned: a poll, a HELLO request
            c.send(codec.encode(_poll(c)))
            c.send(codec.encode(messages.hello_request(c.next_tag())))
            _none_of(c, (*POLL_ANSWERS, wire.HELLO))
            want["auth_unsigned"] += 2
            # replayed poll: answered once
            p = c.sign(_poll(c))
            c.send(p)
            assert c.recv(2.0, POLL_ANSWERS) is not None
            c.send(p)
            _none_of(c, POLL_ANSWERS)
            want["auth_replayed"] += 1
            # replayed SUBSCRIBE: ACKed once
            s = messages.subscribe_frame([1], tag=c.next_tag())
            sb = c.sign(s)
            c.send(sb)
            ack = c.recv(2.0, (wire.ACK,))
            assert ack is not None and messages.decode_ack(ack) == (0, 200)
            c.send(sb)
            _none_of(c, (wire.ACK,))
            want["auth_replayed"] += 1
            # replayed ACK of a report: the report is confirmed once, the copy refused
            note = c.recv(3.0, (wire.NOTIFY,))
            assert note is not None and note.seq == 1 and note.channel == 1
            while not note.flags & wire.F_LAST:  # the report's last fragment
                note = c.recv(3.0, (wire.NOTIFY,))
                assert note is not None
            ab = c.sign(messages.ack_frame(1, 200, channel=1, tag=c.next_tag()))
            c.send(ab)
            c.send(ab)
            want["auth_replayed"] += 1
            nxt = c.recv(3.0, (wire.NOTIFY,))
            while nxt is not None and nxt.seq == 1:  # resends already under way
                nxt = c.recv(3.0, (wire.NOTIFY,))
            assert nxt is not None and nxt.seq == 2  # confirmed: the next number
            c.send(c.sign(messages.subscribe_frame([], tag=c.next_tag())))  # end the session
            assert c.recv(2.0, (wire.ACK,)) is not None
            # old session: a poll made in session 1, sent after the handshake of session 2
            old = c.sign(_poll(c))
            assert c.handshake().session == 2
            c.send(old)
            _none_of(c, POLL_ANSWERS)
            want["auth_replayed"] += 1
            assert _wait_auth_record(c, want) == want
            assert c.rejected == []  # and every frame the board sent verified
            before_boot = c.sign(_poll(c))  # session 2 of boot 1, never sent
        finally:
            c.close()
        # old boot: after a power cut the frame of the boot before is refused (a new epoch)
        b.restart()
        assert b.address is not None
        c = AuthClient(UdpLink(b.address), b.key)
        try:
            h = c.handshake()
            assert (h.session, h.boots) == (1, 2)
            c.send(before_boot)
            _none_of(c, POLL_ANSWERS)
            want = {"auth_forged": 1, "auth_replayed": 0, "auth_unsigned": 0}
            assert _wait_auth_record(c, want) == want
            health = [d for ch, d in c.records(8) if len(d) == messages.HEALTH_SIZE]
            assert messages.decode_health(health[-1])["bad_frames"] == 0  # auth rejects are not "bad"
        finally:
            c.close()


def test_a_new_boot_answers_a_refused_poll_with_its_boot_hello_rate_limited(tmp_path: Path) -> None:
    """After a power cut the host still polls in the old boot's session; the new boot refuses those
    polls, and says at once that it is new (its boot HELLO, a hint), at most every 250 ms; once a
    session exists, refused frames get no answer."""
    with start_board("udp", key="auto", config=CFG, board_dir=tmp_path) as b:
        assert b.address is not None and b.key is not None
        c = AuthClient(UdpLink(b.address), b.key)
        try:
            assert c.handshake().session == 1
            old = [c.sign(_poll(c)) for _ in range(6)]
        finally:
            c.close()
        b.restart()
        assert b.address is not None
        c = AuthClient(UdpLink(b.address), b.key)
        c.ep = auth_host.HostEndpoint(bytes.fromhex(b.key))
        try:
            c.quiet(0.3)  # nothing is owed to us yet
            t0 = time.monotonic()
            for p in old[:5]:  # five refused polls at once: one hint
                c.send(p)
            hint = c.recv(1.0, (wire.HELLO,))
            assert hint is not None and time.monotonic() - t0 < 1.0
            h = messages.decode_hello(hint)
            assert (h.session, h.boots) == (0, 2)  # a boot HELLO: session 0, the second boot
            assert [f for f in c.quiet(0.15) if f[0] & 0x1F == wire.HELLO] == []
            time.sleep(0.3)
            c.send(old[5])  # later than 250 ms: hinted again
            assert c.recv(1.0, (wire.HELLO,)) is not None
            assert c.handshake().session == 1
            c.send(old[0])  # a session exists: refused without a word
            _none_of(c, (wire.HELLO, *POLL_ANSWERS))
        finally:
            c.close()


def test_serial_boot_hello_is_a_hint_and_notify_resends_are_signed_each(tmp_path: Path) -> None:
    cfg = {**CFG, "serial": {"frame": 128}}
    with start_board("serial", key="auto", config=cfg, board_dir=tmp_path) as b:
        assert b.port is not None and b.key is not None
        c = AuthClient(SerialLink(b.port), b.key)
        try:
            # the HELLO the board sent at boot: signed with session 0, a hint (not a session)
            data = c.recv_bytes(3.0)
            assert data is not None and data[0] & 0x1F == wire.HELLO and data[1] & 0x20
            buf = bytearray(data)
            assert c.ep.host_hello(buf, len(buf)) == auth.HINT
            assert messages.decode_hello(codec.decode(data)).session == 0
            assert c.handshake().session == 1
            # every frame fits the link's 128 bytes, signed: a big poll answer, report fragments
            time.sleep(0.5)
            f = c.poll(0, 1)
            n = (messages.decode_recovery(f)[0] - 1) & 0xFFFFFFFF if f.type == wire.RECOVERY else f.seq
            c.poll(n, 255, 2047)
            assert len(c.raw[-1]) <= 128
            c.send(c.sign(messages.subscribe_frame([1], tag=c.next_tag())))
            assert c.recv(2.0, (wire.ACK,)) is not None
            time.sleep(0.4)  # a report of ~8+ events: more than one 128-byte fragment
            # no ACK: the report is sent again after 300 ms, identical above the auth layer
            seen: dict[tuple[int, int], list[bytes]] = {}
            end = time.monotonic() + 4.0
            while time.monotonic() < end and not any(len(v) >= 2 for v in seen.values()):
                f = c.recv(1.0, (wire.NOTIFY,))
                if f is not None and f.seq == 1:
                    assert len(c.raw[-1]) <= 128
                    seen.setdefault((f.index, f.message_id), []).append(c.raw[-1])
            twice = [v for v in seen.values() if len(v) >= 2]
            assert twice, seen.keys()
            a, b2 = twice[0][:2]
            assert a != b2  # a new trailer per transmission (the window would refuse a copy)
            assert codec.decode(a).payload == codec.decode(b2).payload
            assert c.rejected == []
        finally:
            c.close()
        log = (tmp_path / "console.log").read_text()
        assert b.key not in log and b.key.upper() not in log


def test_auth_off_answers_unsigned_and_refuses_signed(tmp_path: Path) -> None:
    with start_board("udp", config=CFG, board_dir=tmp_path) as b:  # key=None: "auth": false
        assert b.address is not None and b.key is None
        assert "auth off" in b.console()
        link = UdpLink(b.address)
        c = AuthClient(link, OTHER_KEY)
        try:
            c.send(c.sign(_poll(c)))  # signed: refused, counted as a bad frame
            _none_of(c, POLL_ANSWERS)
            c.send(codec.encode(messages.hello_request(7)))
            data = c.recv_bytes(2.0)
            assert data is not None and not data[1] & 0x20  # unsigned answer
            assert messages.decode_hello(codec.decode(data)).session is None
            c.send(codec.encode(messages.poll_frame(0, 1, 100, tag=8)))
            data = c.recv_bytes(2.0)
            assert data is not None and data[0] & 0x1F in POLL_ANSWERS and not data[1] & 0x20
            time.sleep(3 * HEALTH_MS / 1000)
            # read the ring unsigned: the health records are the 16-byte ones only
            f = codec.decode(data)
            n = (messages.decode_recovery(f)[0] - 1) & 0xFFFFFFFF
            recs: list[tuple[int, bytes]] = []
            for _ in range(50):
                c.send(codec.encode(messages.poll_frame(n, 255, 1000, tag=9)))
                data = c.recv_bytes(2.0)
                assert data is not None
                f = codec.decode(data)
                if f.type != wire.EVENTS:
                    break
                got = messages.decode_records(f.payload)[1]
                recs += got
                n = (f.seq + len(got) - 1) & 0xFFFFFFFF
            health = [d for ch, d in recs if ch == 8]
            assert health and {len(d) for d in health} == {messages.HEALTH_SIZE}
            assert messages.decode_health(health[-1])["bad_frames"] == 1
        finally:
            c.close()


@pytest.mark.parametrize(
    "cfg,why",
    [
        ({}, "no key"),
        ({"auth": True}, "no key"),
        ({"key": ""}, "no key"),
        ({"key": "0123456789abcdef" * 2 + "zz"}, "bad key"),  # not hex
        ({"key": "ab" * 15}, "bad key"),  # 15 bytes: too short
        ({"key": "cd" * 65}, "bad key"),  # 65 bytes: too long
        ({"key": 1234}, "bad key"),
    ],
)
def test_no_key_or_a_bad_key_is_not_ready_and_never_printed(tmp_path: Path, cfg: dict, why: str) -> None:
    with pytest.raises(BoardError) as e:
        start_board("udp", key=False if not cfg else None, config=cfg, board_dir=tmp_path, timeout=15)
    out = str(e.value)
    assert 'config: %s: authentication needs "key" (32..128 hex digits) or "auth": false' % why in out
    assert "leadwire: not ready: %s; fix config.json and reset" % why in out
    assert "leadwire: ready" not in out
    k = cfg.get("key")
    if isinstance(k, str) and k:
        log = (tmp_path / "console.log").read_text()
        assert k not in log and k[:8] not in log


def test_a_key_given_by_the_launcher_is_used_and_kept_across_reboots(tmp_path: Path) -> None:
    key = os.urandom(16).hex()  # 16 bytes: the shortest key
    with start_board("udp", key=key, config=CFG, board_dir=tmp_path) as b:
        assert b.key == key and b.address is not None
        c = AuthClient(UdpLink(b.address), key)
        try:
            assert c.handshake().session == 1
            b.restart()  # same flash: the same key
            c.ep = auth_host.HostEndpoint(bytes.fromhex(key))
            h = c.handshake()
            assert (h.session, h.boots) == (1, 2)
        finally:
            c.close()


def test_the_auth_record_layout() -> None:
    from leadwire import device

    h = [3, 1, 60, 20000, 15000, 0, 0, 2, 0, 0, 0, 0, 7, 70000, 0]  # the agent's list with auth on
    buf = bytearray(24)
    assert device.health_into(buf, h) == messages.HEALTH_SIZE
    assert messages.decode_health(bytes(buf[:16]))["bad_frames"] == 2
    assert device.health_into(buf, h, 12) == messages.HEALTH_AUTH_SIZE == 6
    got = messages.decode_health_auth(bytes(buf[:6]))
    assert got == {"auth_forged": 7, "auth_replayed": 0xFFFF, "auth_unsigned": 0}  # saturated
    with pytest.raises(wire.WireError):
        messages.decode_health_auth(bytes(7))
    with pytest.raises(wire.WireError):
        messages.decode_health(bytes(22))
