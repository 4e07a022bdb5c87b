"""Frame authentication in the core (auth.Endpoint): tags, sessions, replay window, reboots."""

from __future__ import annotations

import hashlib
import hmac
import random
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leadwire import auth, auth_host, codec, messages, wire

ROOT = Path(__file__).parents[2]
KEY = bytes(range(1, 33))


@given(st.binary(min_size=1, max_size=100), st.binary(min_size=13, max_size=13), st.binary(max_size=600))
def test_tag_is_hmac_sha256_truncated(key: bytes, ctx: bytes, data: bytes) -> None:
    want = hmac.new(key, ctx + data, hashlib.sha256).digest()[: auth.TAG_SIZE]
    assert auth.Key(key).tag(ctx, data, len(data))[: auth.TAG_SIZE] == want


def test_shared_vectors_replay_on_cpython() -> None:
    """The same check the MicroPython unix port runs (tests/mpy): tags, and a whole signed session
    (handshake, reordering, replays, a forgery, unsigned, wrong key, an old session) byte for byte."""
    r = subprocess.run(
        [sys.executable, "tests/mpy/core_runner.py", "tests/vectors", "test_auth_vectors"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.stdout.splitlines() == ["ok test_auth_vectors", "1 passed, 0 failed"], r.stdout + r.stderr


class Pair:
    """A device end and a host end with a helper to sign frames; epoch as the device's boot."""

    def __init__(self, epoch: int = 0x01020304, key: bytes = KEY) -> None:
        self.epoch = epoch
        self.dev = auth.Endpoint(key, auth.TO_HOST)
        self.host = auth_host.HostEndpoint(key)
        self.nonce = 100

    def sign(self, ep: auth.Endpoint, frame: codec.Frame) -> bytes:
        b = bytearray(codec.encode(frame)) + bytearray(auth.AUTH_SIZE)
        n = len(b) - auth.AUTH_SIZE
        if frame.type == wire.HELLO and ep.side == auth.TO_DEVICE:
            m = ep.host_sign_hello(b, n)
        elif frame.type == wire.HELLO:
            m = ep.device_sign_hello(b, n, self.epoch >> 16, self.epoch & 0xFFFF)
        else:
            m = ep.sign_into(b, n)
        assert m == n + auth.AUTH_SIZE and wire.check(b, m) == wire.OK
        return bytes(b[:m])

    def handshake(self) -> int:
        self.nonce += 1
        req = self.sign(self.host, codec.Frame(wire.HELLO, self.nonce, b""))
        assert self.dev.device_hello(bytearray(req), len(req), self.epoch >> 16, self.epoch & 0xFFFF) == 0
        h = messages.Hello(self.epoch, 64, 16, 512, 1, "b", "f", "k", session=0)
        ans = self.sign(self.dev, messages.hello_frame(h))
        assert self.host.host_hello(bytearray(ans), len(ans)) == wire.OK
        session = messages.decode_hello(codec.decode(ans)).session
        assert session is not None
        return session

    def to_host(self, data: bytes) -> int:
        return self.host.verify(bytearray(data), len(data))

    def to_dev(self, data: bytes) -> int:
        return self.dev.verify(bytearray(data), len(data))


def answer(i: int = 0) -> codec.Frame:
    return messages.recovery_frame(1, 2 + i, 7, tag=i & 0xFF)


def test_overhead_is_eight_bytes_and_decode_sees_the_unsigned_frame() -> None:
    p = Pair()
    p.handshake()
    f = messages.poll_frame(12345, 20, 900, tag=9, max_frames=4)
    data = p.sign(p.host, f)
    assert len(data) == len(codec.encode(f)) + 8
    assert codec.decode(data) == f  # flag cleared, trailer dropped


def test_sessions_count_up_and_an_old_session_is_refused() -> None:
    p = Pair()
    assert [p.handshake() for _ in range(3)] == [1, 2, 3]
    old = p.sign(p.host, messages.poll_frame(1))
    p.handshake()
    assert p.to_dev(old) == wire.E_REPLAY  # a frame of the session before: stale
    assert p.to_dev(p.sign(p.host, messages.poll_frame(1))) == wire.OK


def test_a_duplicated_hello_request_keeps_the_session() -> None:
    p = Pair()
    p.handshake()
    p.nonce += 1
    req = p.sign(p.host, codec.Frame(wire.HELLO, p.nonce, b""))
    h = messages.Hello(p.epoch, 64, 16, 512, 1, "b", "f", "k", session=0)
    answers = []
    for _ in range(2):  # the request arrives twice: the device answers twice, in one session
        assert p.dev.device_hello(bytearray(req), len(req), p.epoch >> 16, p.epoch & 0xFFFF) == wire.OK
        answers.append(p.sign(p.dev, messages.hello_frame(h)))
    assert answers[0] == answers[1]  # the same session K, counter 0
    assert [p.host.host_hello(bytearray(a), len(a)) for a in answers] == [wire.OK, wire.E_REPLAY]
    for i in range(3):
        assert p.to_dev(p.sign(p.host, messages.poll_frame(i))) == wire.OK
        assert p.to_host(p.sign(p.dev, answer(i))) == wire.OK


def test_counters_pass_16_bits_on_both_sides() -> None:
    p = Pair()
    p.handshake()
    for lo in (0x7000, 0xE000, 0xFFF0):  # jumps below 2^15 (losses); the receiver follows each
        p.dev.send_lo = p.host.send_lo = lo
        assert p.to_host(p.sign(p.dev, answer())) == wire.OK
        assert p.to_dev(p.sign(p.host, messages.poll_frame(0))) == wire.OK
    for i in range(40):  # 0xFFF1 .. 0x10018: the low 16 bits on the wire wrap, the 32-bit value does not
        assert p.to_host(p.sign(p.dev, answer(i))) == wire.OK
        assert p.to_dev(p.sign(p.host, messages.poll_frame(i))) == wire.OK
    assert (p.host.hi, p.host.lo) == (1, 0x18) and (p.dev.hi, p.dev.lo) == (1, 0x18)


@settings(max_examples=200, deadline=None)
@given(st.randoms(use_true_random=False), st.integers(1, 60))
def test_window_accepts_each_frame_at_most_once(rnd: random.Random, count: int) -> None:
    """Any mix of loss, duplication and reordering: a frame is accepted at most once; one that
    arrives no more than WINDOW behind the newest accepted is accepted; nothing else."""
    p = Pair()
    p.handshake()
    frames = [p.sign(p.dev, answer(i)) for i in range(count)]
    arrivals = [i for i in range(count) for _ in range(rnd.choice([0, 1, 1, 1, 2]))]
    for i in range(len(arrivals) - 1):  # local reordering
        if rnd.random() < 0.3:
            j = min(len(arrivals) - 1, i + rnd.randrange(1, 25))
            arrivals[i], arrivals[j] = arrivals[j], arrivals[i]
    accepted: list[int] = []
    newest = -1
    for i in arrivals:
        code = p.to_host(frames[i])
        want = i not in accepted and i >= newest - auth.WINDOW
        assert code == (wire.OK if want else wire.E_REPLAY), (i, newest, accepted)
        if code == wire.OK:
            accepted.append(i)
            newest = max(newest, i)
    assert p.host.forged == 0 and p.host.replayed == len(arrivals) - len(accepted)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 200), st.integers(0, 7), st.booleans())
def test_any_changed_bit_is_refused_even_with_the_crc_made_right(pos: int, bit: int, host_side: bool) -> None:
    p = Pair()
    p.handshake()
    data = bytearray(p.sign(p.host, messages.poll_frame(77, 10)) if host_side else p.sign(p.dev, answer()))
    pos %= len(data) - wire.CRC_SIZE
    data[pos] ^= 1 << bit
    n = len(data)
    wire.seal(data, n - wire.OVERHEAD - (auth.AUTH_SIZE if data[1] & 0x20 else 0))
    if wire.check(data, n) != wire.OK:
        return  # the change broke the layout (length, flags): refused before auth
    code = p.to_dev(bytes(data)) if host_side else p.to_host(bytes(data))
    assert code in (wire.E_AUTH, wire.E_REPLAY, wire.E_UNSIGNED)


def test_wrong_key_unsigned_and_no_session_are_refused_and_counted() -> None:
    p = Pair()
    other = Pair(key=bytes(32))
    other.handshake()
    assert p.to_dev(p.sign(p.host, messages.poll_frame(1))) == wire.E_AUTH  # no session yet
    p.handshake()
    assert p.to_dev(other.sign(other.host, messages.poll_frame(1))) == wire.E_AUTH
    assert p.to_dev(codec.encode(messages.poll_frame(1))) == wire.E_UNSIGNED
    assert p.to_host(other.sign(other.dev, answer())) == wire.E_AUTH
    assert p.to_host(codec.encode(answer())) == wire.E_UNSIGNED
    assert (p.dev.forged, p.dev.unsigned, p.host.forged, p.host.unsigned) == (2, 1, 1, 1)
    req = other.sign(other.host, codec.Frame(wire.HELLO, 5, b""))
    assert p.dev.device_hello(bytearray(req), len(req), 0, 0) == wire.E_AUTH


def test_a_reboot_makes_every_frame_of_the_old_boot_useless() -> None:
    p = Pair(epoch=0xAAAA0001)
    p.handshake()
    old_answer = p.sign(p.dev, answer())
    old_poll = p.sign(p.host, messages.poll_frame(3))
    assert p.to_host(old_answer) == wire.OK
    # power cut: a new device end with a new epoch; its boot HELLO is only a hint to the host
    p.epoch = 0x5555FFFF
    p.dev = auth.Endpoint(KEY, auth.TO_HOST)
    h = messages.Hello(p.epoch, 64, 16, 512, 2, "b", "f", "k", session=0)
    boot = p.sign(p.dev, messages.hello_frame(h))
    assert p.host.host_hello(bytearray(boot), len(boot)) == auth.HINT
    assert p.to_dev(old_poll) == wire.E_AUTH  # the new boot has no session: nothing is accepted
    p.handshake()
    assert p.to_dev(old_poll) == wire.E_AUTH  # other epoch, other session
    assert p.to_host(old_answer) == wire.E_REPLAY  # the session before: stale, refused
    # an old HELLO answer replayed to a host that asks again fails: it was for another nonce
    p.nonce += 1
    p.sign(p.host, codec.Frame(wire.HELLO, p.nonce, b""))
    assert p.host.host_hello(bytearray(boot), len(boot)) == auth.HINT  # boot HELLOs stay hints
    stale = p.sign(p.dev, messages.hello_frame(h))  # signed for the previous nonce (no new request)
    assert p.host.host_hello(bytearray(stale), len(stale)) in (wire.E_AUTH, wire.E_REPLAY)


@pytest.mark.parametrize(
    ("text", "ok"),
    [("00" * 16, True), ("Ab" * 32, True), ("ff" * 64, True), ("00" * 15, False), ("0" * 33, False),
     ("zz" * 16, False), ("ff" * 65, False), ("", False)],
)  # fmt: skip
def test_parse_key(text: str, ok: bool) -> None:
    if ok:
        assert auth_host.parse_key(text) == bytes.fromhex(text)
    else:
        with pytest.raises(ValueError) as e:
            auth_host.parse_key(text)
        assert text not in str(e.value) or not text


def test_a_key_never_shows_in_repr() -> None:
    p = Pair(key=bytes.fromhex("c0ffee" * 11))
    for obj in (p.dev, p.dev.key, p.host):
        assert "c0ffee" not in repr(obj)
        assert "c0ffee" not in str(vars(obj) if hasattr(obj, "__dict__") else "")


def test_the_split_is_one_way_and_the_device_end_carries_no_host_state() -> None:
    """auth.py (loaded by boards) neither imports nor names a host module; its Endpoint has none of
    the host's HELLO-request state; the host's end is a subclass in auth_host.py."""
    src = (Path(auth.__file__)).read_text()
    assert "auth_host" not in src and "parse_key" not in src
    dev = auth.Endpoint(KEY, auth.TO_HOST)
    assert not {"prev", "asked", "n_prev"} & set(vars(dev))
    assert not hasattr(dev, "host_hello") and not hasattr(dev, "host_sign_hello")
    host = auth_host.HostEndpoint(KEY)
    assert isinstance(host, auth.Endpoint) and host.side == auth.TO_DEVICE and len(host.prev) == 16
    assert auth.AUTH_SIZE is wire.AUTH_SIZE == 8


def test_a_late_older_request_that_moved_the_device_on_is_seen_as_a_newer_session() -> None:
    """The device takes a late copy of an older HELLO request after our handshake: it starts
    session K + 1 under that old nonce. The host refuses the answer (E_REPLAY: an old nonce) and
    newer_session says a handshake is due; an answer of our own session does not."""
    p = Pair()
    reqs = []
    for _ in range(2):  # the first request goes unanswered; the second is answered
        p.nonce += 1
        reqs.append(p.sign(p.host, codec.Frame(wire.HELLO, p.nonce, b"")))
    h = messages.Hello(p.epoch, 64, 16, 512, 1, "b", "f", "k", session=0)
    e_hi, e_lo = p.epoch >> 16, p.epoch & 0xFFFF
    assert p.dev.device_hello(bytearray(reqs[1]), len(reqs[1]), e_hi, e_lo) == wire.OK
    ours = bytearray(p.sign(p.dev, messages.hello_frame(h)))
    assert p.host.host_hello(ours, len(ours)) == wire.OK
    assert not p.host.newer_session(ours, len(ours))
    assert p.dev.device_hello(bytearray(reqs[0]), len(reqs[0]), e_hi, e_lo) == wire.OK  # the late copy
    newer = bytearray(p.sign(p.dev, messages.hello_frame(h)))
    assert p.host.host_hello(newer, len(newer)) == wire.E_REPLAY
    assert p.host.newer_session(newer, len(newer))
