"""Authentication in the bridge's client, against a SimCore with a key (in-process, exact).

The client signs every request (a HELLO with a fresh random nonce starts a session), and checks
every frame before anything acts on it: forged, wrong-key, unsigned, replayed, old-session and
old-boot answers are refused and counted (auth_forged / auth_replayed / auth_unsigned), nothing of
them is stored. The spec-004 cases signed are test_client.py's, run a second time with a key.
"""

from __future__ import annotations

import pytest

from leadwire import auth, auth_host, codec, messages, wire
from leadwire.bridge.client import AUTH_REJECTS, ClientState, DeviceClient
from leadwire.bridge.config import DeviceConfig, PollConfig
from leadwire.tools.simdevice import SimCore

from .helpers import Driver, make_client

pytestmark = pytest.mark.timeout(60)

KEY = bytes(range(100, 132))
OTHER = bytes(range(200, 232))
AUTH = tuple(AUTH_REJECTS.values())  # auth_forged, auth_replayed, auth_unsigned


def rejects(cl: DeviceClient) -> tuple[int, int, int]:
    return tuple(cl.dc[k] for k in AUTH)  # type: ignore[return-value]


def device_rejects(core: SimCore) -> tuple[int, int, int]:
    ep = core.auth
    assert ep is not None
    return ep.forged, ep.replayed, ep.unsigned


def reseal(b: bytearray) -> bytes:
    """Fix the CRC after a change (an attacker's frame: line noise would be a CRC error instead)."""
    n = len(b) - wire.OVERHEAD - (auth.AUTH_SIZE if b[1] & 0x20 else 0)
    wire.seal(b, n + (auth.AUTH_SIZE if b[1] & 0x20 else 0))
    return bytes(b)


def forge_tag(b: bytes) -> bytes:
    x = bytearray(b)
    x[-3] ^= 0x01  # the last tag byte
    return reseal(x)


def ready(core: SimCore, d: Driver) -> None:
    """Handshake, first contact with one event (start offset + 0) stored: polls get EVENTS next."""
    core.write_events(1)
    d.drain()


def answered(cl: DeviceClient, core: SimCore, d: Driver, events: int = 5) -> list[bytes]:
    """A handshake and a drain: the answers (as received) of one POLL with `events` new events."""
    ready(core, d)
    core.write_events(events)
    req = cl.request_bytes(d.t)
    outs = core.handle(req, d.t)
    for o in outs:
        d.feed(o)
    return outs


def test_handshake_signs_everything_with_a_fresh_nonce_per_hello() -> None:
    cl, core, d = make_client(key=KEY, capacity=64, start=1000)
    core.write_events(5)
    d.exchange()  # HELLO
    hello = d.sent[0]
    assert hello[0] & 0x1F == wire.HELLO and hello[1] & 0x20 and len(hello) == wire.OVERHEAD + 8
    f = d.requests[0]
    assert f.payload == b"" and cl.auth is not None and cl.auth.live
    assert core.auth is not None and core.auth.k_lo == 1  # the device's session K = 1
    assert cl.epoch == core.epoch and cl.pc.hello is not None and cl.pc.hello.session == 1
    d.drain()
    assert [e[2] for e in cl.out_events] == [(1000 + i) & 0xFFFFFFFF for i in range(5)]
    # every request went signed (20 bytes of overhead: 8 of trailer), every answer was checked
    assert all(b[1] & 0x20 for b in d.sent) and len(d.sent[1]) == wire.OVERHEAD + 8 + 4
    assert rejects(cl) == (0, 0, 0) and device_rejects(core) == (0, 0, 0)
    # a new HELLO (periodic, or after silence) has a new random nonce and starts session 2
    nonces = set()
    for _ in range(5):
        cl.pc.ask_hello()
        d.exchange()
        assert d.requests[-1].type == wire.HELLO
        nonces.add(d.requests[-1].seq)
    assert len(nonces) == 5 and core.auth.k_lo == 6 and cl.pc.hello.session == 6
    core.write_events(3)
    d.drain()
    assert len(cl.out_events) == 8 and rejects(cl) == (0, 0, 0) and device_rejects(core) == (0, 0, 0)


def test_nonce_comes_from_os_urandom_not_a_counter() -> None:
    cl = DeviceClient(1, DeviceConfig("d", "udp", key=KEY), PollConfig())
    seqs = {codec.decode(cl.request_bytes(float(i))).seq for i in range(20)}
    assert len(seqs) == 20  # 20 HELLOs (no answer): 20 different nonces


def test_forged_answer_refused_counted_nothing_stored_then_the_real_one_is_taken() -> None:
    cl, core, d = make_client(key=KEY, capacity=64, start=49)
    ready(core, d)
    core.write_events(4)
    req = cl.request_bytes(d.t)
    (real,) = core.handle(req, d.t)
    assert d.feed(forge_tag(real)) is False  # not an answer: the real one may still come
    assert rejects(cl) == (1, 0, 0) and len(cl.out_events) == 1  # the first contact's event only
    body = bytearray(real)
    body[wire.HEADER_SIZE + 5] ^= 0x40  # a changed event, the tag left as it was
    assert d.feed(reseal(body)) is False and rejects(cl) == (2, 0, 0)
    assert d.feed(real) is True
    assert [e[2] for e in cl.out_events] == [49, 50, 51, 52, 53] and rejects(cl) == (2, 0, 0)


def test_wrong_key_device_every_answer_refused_as_forged() -> None:
    core = SimCore(0, capacity=64, start=7, key=OTHER)
    cl, core, d = make_client(core=core, client_key=KEY)
    core.write_events(10)
    for _ in range(4):
        d.exchange()
    # the device refuses our HELLOs (forged there), answers nothing: only timeouts here
    assert device_rejects(core) == (4, 0, 0) and cl.dc["timeouts"] == 4
    assert cl.epoch is None and cl.out_events == [] and not cl.auth.live  # type: ignore[union-attr]
    # its own boot HELLO, signed with its key, and a HELLO answer made for us with its key: forged
    assert d.feed(core.hello(0)) is False
    assert rejects(cl) == (1, 0, 0)
    assert cl.out_events == [] and cl.out_boots == []


def test_unsigned_frames_refused_when_the_device_has_a_key() -> None:
    cl, core, d = make_client(key=KEY, capacity=64, start=299)
    ready(core, d)
    core.write_events(2)
    plain = SimCore(0, capacity=64, start=299)  # the same answers, unsigned
    plain.write_events(3)
    d.exchange(drop=True)  # the outstanding POLL's tag
    poll = d.requests[-1]
    for a in plain.handle(codec.encode(poll), 0.0):
        assert d.feed(a) is False
    assert d.feed(plain.hello(0)) is False  # an unsigned HELLO too
    assert rejects(cl) == (0, 0, 2) and len(cl.out_events) == 1  # the first contact's event only
    d.exchange()
    assert [e[2] for e in cl.out_events] == [299, 300, 301] and rejects(cl) == (0, 0, 2)


def test_replayed_answers_refused_counted_as_replays_not_forgeries() -> None:
    cl, core, d = make_client(key=KEY, capacity=64, start=900)
    outs = answered(cl, core, d, events=3)
    stored = len(cl.out_events)
    for _ in range(3):
        for o in outs:
            assert d.feed(o) is False
    assert rejects(cl) == (0, 3, 0) and len(cl.out_events) == stored == 1 + 3
    assert cl.dc["stale_answers"] == 0  # refused before the protocol saw it
    # a replayed HELLO answer of this session, too
    cl.pc.ask_hello()
    req = cl.request_bytes(d.t)
    (h,) = core.handle(req, d.t)
    assert d.feed(h) is True and d.feed(h) is False
    assert rejects(cl) == (0, 4, 0)


def test_old_session_answers_after_a_new_handshake_are_stale_not_attacks() -> None:
    cl, core, d = make_client(key=KEY, capacity=64, start=10)
    outs = answered(cl, core, d, events=2)
    d.exchange(hold=True)  # a POLL answered in session 1, held back
    held = list(d.held)
    d.held.clear()
    cl.pc.ask_hello()
    d.exchange()  # HELLO: session 2
    assert core.auth is not None and core.auth.k_lo == 2
    for o in [*outs, *held]:
        assert d.feed(o) is False
    assert rejects(cl) == (0, 1 + len(held), 0)
    # two handshakes later the first session's frames are unknown: forged (an old session's frame
    # cannot be told apart from a made-up one without keeping every old context)
    cl.pc.ask_hello()
    d.exchange()
    assert d.feed(outs[0]) is False and rejects(cl) == (1, 1 + len(held), 0)
    core.write_events(2)
    d.drain()
    assert [e[2] for e in cl.out_events] == [10, 11, 12, 13, 14]


def test_old_boot_answers_refused_after_a_restart_and_the_restart_found_by_handshake() -> None:
    cl, core, d = make_client(key=KEY, capacity=64, start=500)
    outs = answered(cl, core, d, events=3)
    hello_old = core.hello(0)  # = the session's HELLO answer (counter 0), a copy
    old_epoch = core.epoch
    core.boot(start=7000)  # power cut: new epoch, new endpoint, no session
    core.write_events(2)
    # our polls are signed in the old session: the new boot refuses them (forged there), silence here
    for _ in range(3):
        d.exchange()
    assert device_rejects(core) == (3, 0, 0) and cl.dc["timeouts"] == 3
    # its boot HELLO (K = 0) is a hint: a handshake next, nothing else changes
    assert d.feed(core.hello(0)) is False and rejects(cl) == (0, 0, 0) and cl.pc.hello_due
    # ... and while a request is out, it ends the wait (no answer will come): the HELLO goes at once
    cl.request_bytes(d.t)  # (this one: the HELLO; pretend it is lost and ask again below)
    assert cl.outstanding and d.feed(core.hello(0)) is True and not cl.outstanding and cl.next_delay == 0
    d.exchange()  # HELLO -> new boot, detected by hello
    assert d.requests[-1].type == wire.HELLO and cl.epoch == core.epoch != old_epoch
    assert cl.dc["restarts"] == 1 and [b.detected_by for b in cl.out_boots] == ["hello", "hello"]
    # the old boot's answer and its HELLO answer: frames of the session before, refused as replays
    for o in outs:
        assert d.feed(o) is False
    assert d.feed(hello_old) is False and rejects(cl) == (0, 2, 0)
    d.drain()
    assert [e[2] for e in cl.out_events][-2:] == [7000, 7001] and len(cl.out_events) == 1 + 3 + 2


def test_late_hello_answers_after_retries_are_stale_not_forged() -> None:
    """auth.py fix (PENDING): a HELLO answer that arrives after the host asked again (new nonce)
    was counted as forged; a lossy or slow link made 'attacks' out of nothing."""
    cl, core, d = make_client(key=KEY, capacity=64, start=1)
    for _ in range(auth_host.PENDING):
        d.exchange(hold=True)  # HELLO answered, the answer late: timeout, a new HELLO
    assert len(d.held) == auth_host.PENDING and cl.epoch is None
    d.exchange()  # answered: session PENDING + 1; then the held answers arrive
    assert cl.auth is not None and cl.auth.live and cl.epoch == core.epoch
    assert rejects(cl) == (0, auth_host.PENDING, 0)
    core.write_events(3)
    d.drain()
    assert len(cl.out_events) == 3 and rejects(cl) == (0, auth_host.PENDING, 0)


def test_duplicated_and_late_answers_on_the_line_count_no_forgery() -> None:
    """netem-style duplication, delay, loss and corruption: replays and CRC errors, never forged."""
    cl, core, d = make_client(key=KEY, capacity=32, start=5, poll=PollConfig(batch=4))
    faults = ["dup", "hold", "ok", "drop", "dup", "corrupt", "ok", "hold", "hold", "ok", "dup"] * 6
    dups = 0
    for i, f in enumerate(faults):
        core.write_events(i % 4)
        dups += f == "dup"
        d.exchange(**({} if f == "ok" else {f: True}))
    core.write_events(1)
    d.drain()
    offs = [e[2] for e in cl.out_events]
    assert offs == list(range(5, 5 + core.generated))  # every event once, in order (no overrun)
    forged, replayed, unsigned = rejects(cl)
    assert forged == 0 and unsigned == 0 and replayed >= dups
    assert cl.dc["crc_errors"] == faults.count("corrupt")
    assert device_rejects(core) == (0, 0, 0)


def test_requests_replayed_or_forged_toward_the_device_are_refused_there() -> None:
    """The other direction on the simulator: what the bridge sends can not be replayed either."""
    cl, core, d = make_client(key=KEY, capacity=64, start=40, subscribe=(2,))
    d.run(4)  # HELLO, SUBSCRIBE, POLLs
    core.write_events(2)
    poll = cl.request_bytes(d.t)
    assert len(core.handle(poll, d.t)) == 1
    assert core.handle(poll, d.t) == []  # the same POLL again
    sub = d.sent[1]
    assert codec.decode(sub).type == wire.SUBSCRIBE and core.handle(sub, d.t) == []
    assert core.handle(forge_tag(cl.request_bytes(d.t)), d.t) == []
    assert core.handle(codec.encode(messages.poll_frame(0, 8, 512, 9)), d.t) == []
    other = DeviceClient(2, DeviceConfig("x", "udp", key=OTHER), PollConfig())
    assert core.handle(other.request_bytes(0.0), d.t) == []  # a HELLO with the wrong key
    assert device_rejects(core) == (2, 2, 1)


def test_auth_off_refuses_signed_frames_both_ways() -> None:
    cl, core, d = make_client(capacity=16, start=3)  # auth = false on both ends
    core.write_events(2)
    d.drain()
    signed = SimCore(0, capacity=16, start=3, key=KEY)
    signer = DeviceClient(2, DeviceConfig("x", "udp", key=KEY), PollConfig())
    assert core.handle(signer.request_bytes(0.0), 0.0) == [] and core.bad_frames == 1  # the firmware's rule
    (ans,) = signed.handle(signer.request_bytes(0.0), 0.0)
    assert d.feed(ans) is False and cl.dc["bad_frames"] == 1 and rejects(cl) == (0, 0, 0)
    assert len(cl.out_events) == 2


def test_keys_never_in_reprs() -> None:
    cfg = DeviceConfig("d", "udp", key=KEY)
    cl = DeviceClient(1, cfg, PollConfig())
    for text in (repr(cfg), str(cfg), repr(cl.auth.key), repr(vars(cl.auth.key).keys())):  # type: ignore[union-attr]
        assert KEY.hex() not in text and KEY.hex()[:16] not in text


def test_counters_stored_with_the_client_state() -> None:
    import json

    cl, core, d = make_client(key=KEY, capacity=16, start=3)
    outs = answered(cl, core, d, events=1)
    d.feed(outs[0])
    d.feed(forge_tag(outs[0]))
    c = json.loads(cl.counters_json())["device"]
    assert (c["auth_forged"], c["auth_replayed"], c["auth_unsigned"]) == (1, 1, 0)
    st = ClientState(counters=json.loads(cl.counters_json()))  # as the store keeps them
    again = DeviceClient(1, DeviceConfig("dev", "udp", key=KEY), PollConfig(), state=st)
    assert rejects(again) == (1, 1, 0)


def test_a_duplicated_hello_request_costs_nothing() -> None:
    """The line duplicates our HELLO request: the device keeps its session for the same nonce and
    answers again with the same bytes (session K, counter 0); the copy is refused as a replay and
    nothing else happens: no new handshake, no lost round."""
    cl, core, d = make_client(key=KEY, capacity=64, start=20)
    req = cl.request_bytes(d.t)  # HELLO
    (a1,) = core.handle(req, d.t)
    (a2,) = core.handle(req, d.t)  # the duplicate: the same session, answered again
    assert a1 == a2
    assert d.feed(a1) is True and cl.pc.hello is not None and cl.pc.hello.session == 1
    assert d.feed(a2) is False and rejects(cl) == (0, 1, 0) and not cl.pc.hello_due
    assert core.auth is not None and core.auth.k_lo == 1
    core.write_events(3)
    d.drain()
    assert len(cl.out_events) == 3 and cl.dc["timeouts"] == 0
    assert rejects(cl) == (0, 1, 0) and device_rejects(core) == (0, 0, 0)


def test_a_late_duplicate_of_an_older_hello_request_costs_one_round() -> None:
    """Our first HELLO's answer is lost, we ask again (a new nonce, session 2); then a late copy of the
    first request reaches the device, which starts session 3 under the old nonce. Its answer is
    refused (a stale nonce) and, carrying a newer K, makes us hand-shake again at once."""
    cl, core, d = make_client(key=KEY, capacity=64, start=20)
    req1 = cl.request_bytes(d.t)
    core.handle(req1, d.t)  # session 1: its answer lost
    cl.pc.ask_hello()
    req2 = cl.request_bytes(d.t)
    (a2,) = core.handle(req2, d.t)
    assert d.feed(a2) is True and cl.pc.hello is not None and cl.pc.hello.session == 2
    (a3,) = core.handle(req1, d.t)  # the late copy of request 1: session 3 under nonce 1
    assert core.auth is not None and core.auth.k_lo == 3
    assert d.feed(a3) is False and rejects(cl) == (0, 1, 0) and cl.pc.hello_due
    d.exchange()  # the handshake again (session 4)
    assert core.auth.k_lo == 4
    core.write_events(3)
    d.drain()
    assert len(cl.out_events) == 3 and device_rejects(core) == (0, 0, 0)


def test_late_copies_of_older_hello_answers_start_no_handshake() -> None:
    cl, core, d = make_client(key=KEY, capacity=64, start=20)
    d.exchange()  # session 1
    h1 = core.hello(0)  # a copy of session 1's answer (counter 0)
    cl.pc.ask_hello()
    d.exchange()  # session 2
    assert d.feed(h1) is False and rejects(cl) == (0, 1, 0) and not cl.pc.hello_due


def test_burst_answers_each_frame_signed_and_checked() -> None:
    cl, core, d = make_client(key=KEY, capacity=256, start=9, poll=PollConfig(batch=4, frames=4))
    ready(core, d)
    core.write_events(40)
    polls = len([r for r in d.requests if r.type == wire.POLL])
    d.drain()
    assert [e[2] for e in cl.out_events] == list(range(9, 50))
    assert len([r for r in d.requests if r.type == wire.POLL]) - polls <= 4  # 16 events per round trip
    assert rejects(cl) == (0, 0, 0) and device_rejects(core) == (0, 0, 0)
    # a frame of a burst replayed: refused; the others of the burst were taken once
    core.write_events(8)
    req = cl.request_bytes(d.t)
    outs = core.handle(req, d.t)
    assert len(outs) == 2
    assert d.feed(outs[0]) is False and d.feed(outs[0]) is False and d.feed(outs[1]) is True
    assert rejects(cl) == (0, 1, 0) and [e[2] for e in cl.out_events][-8:] == list(range(50, 58))
