"""The light benchmark simulator (VirtualRing) answers exactly like the core's EventRing."""

from __future__ import annotations

import random

import pytest

from leadwire import auth, codec, device, messages
from leadwire.ring_host import HostRing
from leadwire.tools.simdevice import SimCore, VirtualRing, _out, device_link

pytestmark = pytest.mark.timeout(60)


def pair(rate: float, capacity: int, payload: int, start: int, seed: int = 3) -> tuple[VirtualRing, SimCore]:
    vr = VirtualRing(7, rate, capacity, payload, seed=seed, t0_us=1_700_000_000_000_000, start=start)
    slot = max(32, payload)
    core = SimCore(7, capacity=capacity, slot_size=slot, seed=seed, start=start, payload_size=payload)
    assert (core.epoch, core.start) == (vr.epoch, vr.start)
    return vr, core


@pytest.mark.parametrize("payload", [16, 64])
@pytest.mark.parametrize("start", [0xFFFFFFF0, 12345])
def test_virtual_ring_answers_byte_for_byte_like_event_ring(payload: int, start: int) -> None:
    rng = random.Random(payload * 7 + start)
    vr, core = pair(rate=3.0, capacity=16, payload=payload, start=start)
    tag = 0
    for _ in range(400):
        # the device side advances to a random time: both rings hold the same events
        now = vr.gen_us(core.generated + rng.randrange(0, 6)) + rng.randrange(0, 3)
        for i in range(core.generated, vr.generated(now)):
            core.write_events(1, vr.gen_us(i))
        assert core.generated == vr.generated(now)
        # any n: before, inside and after the held range, and far away (recovery)
        newest = core.ring.newest()
        n = rng.choice([newest, (newest - rng.randrange(0, 20)) & 0xFFFFFFFF, rng.getrandbits(32), 0])
        tag = (tag + 1) & 0xFF
        me, mb = rng.choice([1, 5, 64, 255]), rng.choice([16, 100, 2047])
        req = codec.encode(messages.poll_frame(n, me, mb, tag))
        assert vr.handle(req, now) == core.handle(req)
    hello = codec.encode(messages.hello_request(9))
    assert vr.handle(hello, 0) == core.handle(hello)


def test_virtual_ring_generation_times_and_limit() -> None:
    vr = VirtualRing(0, 1000.0, 64, 64, t0_us=1_000_000, limit=5)
    assert vr.generated(999_999) == 0 and vr.generated(1_000_000) == 1 and vr.generated(1_002_500) == 3
    assert vr.generated(10_000_000) == 5
    assert vr.handle(b"\x00" * 12, 0) == [] and vr.bad_frames == 1


def test_signed_virtual_ring_answers_byte_for_byte_like_signed_sim_core() -> None:
    """Auth on: the handshake and every signed poll answered identically by both (one host end)."""
    from leadwire import auth_host, wire

    key = bytes(range(32))
    t0 = 1_700_000_000_000_000
    vr = VirtualRing(7, 3.0, 16, 16, seed=3, t0_us=t0, start=12345, key=key)
    core = SimCore(7, capacity=16, slot_size=32, seed=3, start=12345, payload_size=16, key=key)
    host = auth_host.HostEndpoint(key)

    def signed(frame: object, hello: bool = False) -> bytes:
        b = bytearray(codec.encode(frame)) + bytearray(wire.AUTH_SIZE)  # type: ignore[arg-type]
        n = len(b) - wire.AUTH_SIZE
        return bytes(b[: host.host_sign_hello(b, n) if hello else host.sign_into(b, n)])

    req = signed(codec.Frame(wire.HELLO, 0xABCDEF01, b"", message_id=1), hello=True)
    (ans,) = vr.handle(req, t0)
    assert [ans] == core.handle(req)
    assert host.host_hello(bytearray(ans), len(ans)) == wire.OK
    rng = random.Random(5)
    kinds = set()
    for tag in range(2, 200):
        now = vr.gen_us(core.generated + rng.randrange(0, 6))
        for i in range(core.generated, vr.generated(now)):
            core.write_events(1, vr.gen_us(i))
        newest = core.ring.newest()
        n = rng.choice([newest, (newest - rng.randrange(0, 20)) & 0xFFFFFFFF, rng.getrandbits(32)])
        req = signed(messages.poll_frame(n, rng.choice([1, 5, 255]), rng.choice([16, 100, 2000]), tag & 0xFF))
        (a,) = vr.handle(req, now)
        assert [a] == core.handle(req)
        assert host.verify(bytearray(a), len(a)) == wire.OK
        kinds.add(wire.frame_type(a))
    assert kinds == {wire.EVENTS, wire.NO_EVENT, wire.RECOVERY}
    assert vr.refused == 0 and core.refused == 0


def test_the_simulators_links_answer_the_responder_vectors() -> None:
    """The simulators' link (device_link, in the firmware's layout) and their sender (_out: signs
    as the firmware's _send) give device.respond's golden vectors, frame for frame."""
    import json
    from pathlib import Path

    vec = Path(__file__).parents[1] / "vectors" / "responder.json"
    for v in json.loads(vec.read_text()):
        ring = HostRing(v["capacity"], v["start"], v["slot_size"], epoch=v["epoch"])
        for a in v["appends"]:
            ring.write(bytes.fromhex(a["data"]), a["channel"])
        ep = auth.Endpoint(bytes.fromhex(v["key"]), auth.TO_HOST) if v["key"] else None
        hint = (lambda ep=ep: 0 if ep.live else 1) if ep else None  # type: ignore[misc]
        L = device_link(bytes.fromhex(v["hello"]), ep, v["epoch"], v["frame"], hint)
        for s in v["steps"]:
            f = bytes.fromhex(s["frame"])
            out: list[bytes] = []
            assert device.respond(L, f, len(f), out, ring, _out) == s["result"], s["what"]
            assert [b.hex() for b in out] == s["answers"], s["what"]
        if ep is not None:
            assert [ep.forged, ep.replayed, ep.unsigned] == v["rejects"]
