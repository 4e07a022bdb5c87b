"""docs/protocol.md kept honest: its worked hex examples, derived numbers, error codes and type numbers
are parsed from the markdown and checked against the core (exact bytes), the device's buffers and,
for the signed examples, an HMAC computed with the standard library from the documented context."""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from pathlib import Path

import pytest

from leadwire import auth, auth_host, codec, frames, framing, messages, ring, wire

ROOT = Path(__file__).parents[2]
DOC = (ROOT / "docs" / "protocol.md").read_text()
HEX_LINE = re.compile(r"^    ((?:[0-9a-f]{2}(?: \| | ))*[0-9a-f]{2})$")

KEY = bytes(range(16))
E = 0xDEADBEEF
H = 0x12345678


def section(title: str) -> str:
    """The text of the `## ...` section whose title starts with `title`."""
    m = re.search(r"^## %s.*?$(.*?)(?=^## |\Z)" % re.escape(title), DOC, re.M | re.S)
    assert m, "no section %r in docs/protocol.md" % title
    return m.group(1)


def examples() -> dict[str, list[bytes]]:
    """name -> every hex line under its `<!-- example: name -->` marker (annotated copies too)."""
    out: dict[str, list[bytes]] = {}
    name = None
    for line in section("11. Worked examples").splitlines():
        m = re.match(r"<!-- example: (\w+) -->", line)
        if m:
            name = m.group(1)
            out[name] = []
            continue
        h = HEX_LINE.match(line)
        if h and name:
            out[name].append(bytes.fromhex(h.group(1).replace("|", "")))
    return out


def _signed(frame: codec.Frame, sign) -> bytes:  # type: ignore[no-untyped-def]
    b = bytearray(codec.encode(frame)) + bytearray(auth.AUTH_SIZE)
    return bytes(b[: sign(b, len(b) - auth.AUTH_SIZE)])


def _ctx(direction: int, epoch: int, session: int, counter: int) -> bytes:
    return bytes([direction]) + b"".join(v.to_bytes(4, "big") for v in (epoch, session, counter))


def _stdlib_tag_ok(frame: bytes, ctx: bytes) -> bool:
    """The documented rule, independent of auth.py: tag = HMAC-SHA256(key, ctx | header | payload)[:6],
    trailer = counter low u16 | tag, then the CRC."""
    length = ((frame[4] & 7) << 8) | frame[5]
    end = wire.HEADER_SIZE + length
    counter = int.from_bytes(ctx[9:13], "big") & 0xFFFF
    want = hmac.new(KEY, ctx + frame[:end], hashlib.sha256).digest()[:6]
    return frame[end : end + 2] == counter.to_bytes(2, "big") and frame[end + 2 : end + 8] == want


def expected() -> dict[str, bytes]:
    """Every worked example, made by the core."""
    r = ring.EventRing(8, start=0xFFFFFFFF, slot_size=16)
    r.write(b"\x01\x02", 1, 2)
    r.write(b"hi", 2, 2)
    buf = bytearray(100)
    ev = bytes(buf[: r.answer_into(buf, 0xFFFF, 0xFFFE, 32, 1400)])  # POLL(0xFFFFFFFE)
    ev_wrap = bytes(buf[: r.answer_into(buf, 0xFFFF, 0xFFFF, 32, 1400)])  # POLL(0xFFFFFFFF)
    hello = messages.Hello(E, 256, 64, 1024, 7, "pico-1", "0.1.0", "rp2")
    no_event = codec.encode(codec.Frame(wire.NO_EVENT, 0x12345678))
    out = {
        "poll": codec.encode(messages.poll_frame(0xFFFFFFFF, 32, 1400)),
        "events": ev,
        "events_after_wrap": ev_wrap,
        "burst_poll": codec.encode(messages.poll_frame(0x10, 64, 1000, tag=5, max_frames=8)),
        "no_event": no_event,
        "recovery": codec.encode(messages.recovery_frame(100, 355, E)),
        "hello": codec.encode(messages.hello_frame(hello)),
        "subscribe": codec.encode(messages.subscribe_frame([9, 1, 8], tag=7)),
        "notify": codec.encode(
            codec.Frame(wire.NOTIFY, 1, b"abc", channel=9, priority=5, flags=0, message_id=200, index=3)
        ),
        "ack": codec.encode(messages.ack_frame(1, 200, channel=9)),
        "cobs": framing.encode(no_event),
    }
    # the signed ones: a whole handshake between the core's two ends
    host = auth_host.HostEndpoint(KEY)
    dev = auth.Endpoint(KEY, auth.TO_HOST)
    req = _signed(codec.Frame(wire.HELLO, H, b"", message_id=1), host.host_sign_hello)
    assert dev.device_hello(bytearray(req), len(req), E >> 16, E & 0xFFFF) == wire.OK
    hello.session = 0  # the 4 bytes device_sign_hello fills with K
    ans = _signed(
        messages.hello_frame(hello, tag=1), lambda b, n: dev.device_sign_hello(b, n, E >> 16, E & 0xFFFF)
    )
    assert host.host_hello(bytearray(ans), len(ans)) == wire.OK
    poll = _signed(messages.poll_frame(0xFFFFFFFF, 32, 1400, tag=2), host.sign_into)
    assert dev.verify(bytearray(poll), len(poll)) == wire.OK
    boot = _signed(
        messages.hello_frame(hello, tag=0),
        lambda b, n: auth.Endpoint(KEY, auth.TO_HOST).device_sign_hello(b, n, E >> 16, E & 0xFFFF),
    )
    assert host.host_hello(bytearray(boot), len(boot)) == auth.HINT
    out.update(signed_hello_request=req, signed_hello_answer=ans, signed_poll=poll, boot_hello=boot)
    return out


def test_every_worked_example_is_what_the_core_makes_byte_for_byte() -> None:
    doc = examples()
    want = expected()
    assert set(doc) == set(want), set(doc) ^ set(want)
    for name, lines in doc.items():
        assert lines, "example %s has no hex line" % name
        for got in lines:
            assert got == want[name], "%s: doc %s, core %s" % (name, got.hex(" "), want[name].hex(" "))


def test_the_examples_say_what_they_show() -> None:
    ex = {k: v[0] for k, v in examples().items()}
    # the EVENTS example answers POLL(0xFFFFFFFE): POLL(0xFFFFFFFF) would start at 0, not at the wrap
    f = codec.decode(ex["events"])
    assert f.seq == 0xFFFFFFFF and messages.decode_records(f.payload) == (0, [(1, b"\x01\x02"), (2, b"hi")])
    assert codec.decode(ex["events_after_wrap"]).seq == 0
    assert messages.decode_poll(codec.decode(ex["poll"])) == (0xFFFFFFFF, 32, 1400)
    assert messages.poll_frames(codec.decode(ex["burst_poll"])) == 8
    assert messages.decode_recovery(codec.decode(ex["recovery"])) == (100, 355)
    assert framing.decode(ex["cobs"][:-1]) == ex["no_event"]
    assert framing._encode_own(ex["no_event"]) == ex["cobs"]  # the device's encoder too
    # the signed frames: length field = payload only; the trailer verifies in the documented context
    req, ans = ex["signed_hello_request"], ex["signed_hello_answer"]
    poll, boot = ex["signed_poll"], ex["boot_hello"]
    assert len(req) == wire.OVERHEAD + auth.AUTH_SIZE and req[5] == 0
    assert _stdlib_tag_ok(req, bytes(13))  # the zero context
    assert _stdlib_tag_ok(ans, _ctx(1, E, H, 0))
    assert messages.decode_hello(codec.decode(ans)).session == 1  # K ends the payload
    assert _stdlib_tag_ok(poll, _ctx(0, E, 1, 1))  # the host's session field is the device's K
    assert _stdlib_tag_ok(boot, _ctx(1, E, 0, 0)) and boot[3] == 0
    assert messages.decode_hello(codec.decode(boot)).session == 0
    # the contexts written out in the text
    shown = re.findall(
        r"context \(([01], E, [HK0], [01])\) =\s+`([0-9a-f ]+)`", section("11. Worked examples")
    )
    assert shown == [("1, E, H, 0", _ctx(1, E, H, 0).hex(" ")), ("0, E, K, 1", _ctx(0, E, 1, 1).hex(" "))]


def _firmware_limits() -> tuple[int, int]:
    agent = (ROOT / "firmware" / "lwagent.py").read_text()
    boot = (ROOT / "firmware" / "lwboot.py").read_text()
    rx = re.search(r"^_RX = const\((\d+)\)", agent, re.M)
    ser = re.search(r"StreamDecoder\((\d+) \+ ax\)", boot)
    assert rx and ser, "the device's receive limits moved: update this test and docs/protocol.md"
    return int(rx.group(1)), int(ser.group(1))


def derived() -> dict[str, int]:
    rx_udp, rx_ser = _firmware_limits()
    signed = wire.OVERHEAD + auth.AUTH_SIZE
    return {
        "HEADER_SIZE": wire.HEADER_SIZE,
        "OVERHEAD": wire.OVERHEAD,
        "AUTH_SIZE": auth.AUTH_SIZE,
        "SIGNED_OVERHEAD": signed,
        "MAX_PAYLOAD": wire.MAX_PAYLOAD,
        "MAX_FRAME": wire.MAX_FRAME,
        "MAX_SIGNED_FRAME": signed + wire.MAX_PAYLOAD,
        "MAX_COBS": framing.max_encoded(wire.MAX_FRAME),
        "MAX_COBS_SIGNED": framing.max_encoded(signed + wire.MAX_PAYLOAD),
        "MAX_BATCH": wire.MAX_BATCH,
        "MAX_RECORD_DATA": wire.MAX_PAYLOAD - wire.BATCH_HEAD - wire.RECORD_HEAD,
        "MAX_BURST": wire.MAX_INDEX + 1,
        "MAX_BURST_EVENTS": (wire.MAX_INDEX + 1) * wire.MAX_BATCH,
        "MAX_FRAGMENTS": frames.MAX_FRAGMENTS,
        "MAX_REPORT_BODY": frames.MAX_FRAGMENTS * wire.MAX_PAYLOAD,
        "MAX_CAPACITY": ring.MAX_CAPACITY,
        "CONTEXT_SIZE": len(auth.Endpoint(KEY, auth.TO_HOST).tx),
        "TAG_SIZE": auth.TAG_SIZE,
        "REPLAY_WINDOW": auth.WINDOW,
        "KEY_MIN": auth.KEY_MIN,
        "KEY_MAX": auth.KEY_MAX,
        "DEVICE_RX_UDP": rx_udp,
        "DEVICE_RX_SERIAL": rx_ser,
        "DEVICE_COBS_RUN": framing.max_encoded(rx_ser),
        "MAX_SUBSCRIBE_CHANNELS": min(
            rx_udp - signed - 1, rx_ser - wire.OVERHEAD - 1, rx_ser + 8 - signed - 1
        ),
    }


def test_the_derived_numbers_are_the_code_s() -> None:
    rows = re.findall(r"^\| `([A-Z_]+)` \| ([\d,]+) \|", section("2. Derived numbers"), re.M)
    doc = {name: int(v.replace(",", "")) for name, v in rows}
    assert doc == derived()


def test_the_derived_limits_hold_in_the_code() -> None:
    d = derived()
    # the largest frames exist and no larger one does
    big = codec.encode(codec.Frame(wire.EVENTS, 0, bytes([1]) * wire.MAX_PAYLOAD))
    assert len(big) == d["MAX_FRAME"] and wire.check(big, len(big)) == wire.OK
    with pytest.raises(ValueError):
        codec.encode(codec.Frame(wire.EVENTS, 0, bytes(wire.MAX_PAYLOAD + 1)))
    signed = bytearray(big) + bytearray(auth.AUTH_SIZE)
    n = auth.Endpoint(KEY, auth.TO_HOST).sign_into(signed, len(big))
    assert n == d["MAX_SIGNED_FRAME"] and wire.check(signed, n) == wire.OK
    # the COBS worst case (no zero byte: a 0xFF code every 254 bytes) and the exact oversize limit
    worst = bytes(signed[:n]).replace(b"\x00", b"\x01")
    assert len(framing.encode(big.replace(b"\x00", b"\x01"))) == d["MAX_COBS"] + 1
    assert len(framing.encode(worst)) == d["MAX_COBS_SIGNED"] + 1
    for cap, run in ((wire.MAX_FRAME, d["MAX_COBS"]), (d["DEVICE_RX_SERIAL"], d["DEVICE_COBS_RUN"])):
        dec = framing.StreamDecoder(cap)
        assert [getattr(x, "code", 0) for x in dec.feed(b"\x01" * run + b"\x00")] != [wire.E_OVERSIZE]
        assert [getattr(x, "code", 0) for x in dec.feed(b"\x01" * (run + 1) + b"\x00")] == [wire.E_OVERSIZE]
    # one POLL fetches at most 32 frames of 255 records
    with pytest.raises(ValueError):
        messages.poll_frame(0, max_frames=d["MAX_BURST"] + 1)
    with pytest.raises(ValueError):
        messages.encode_records([(0, b"")] * (d["MAX_BATCH"] + 1))
    big_sub = codec.encode(messages.subscribe_frame(range(d["MAX_SUBSCRIBE_CHANNELS"])))
    assert len(big_sub) + auth.AUTH_SIZE <= d["DEVICE_RX_UDP"] and len(big_sub) <= d["DEVICE_RX_SERIAL"]


def test_error_codes_and_type_numbers_are_the_code_s() -> None:
    codes = re.findall(r"`(E_[A-Z]+)` \((\d+)\)", DOC)
    assert len({c for c, _ in codes}) == 12
    for name, value in codes:
        assert getattr(wire, name) == int(value), name
    types = re.findall(r"^\| (\d+) \| ([A-Z_]+) \|", section("3. Frame types"), re.M)
    assert {getattr(wire, name) == int(v) for v, name in types} == {True}
    assert {name for _, name in types} == set(codec.TYPE_NAMES.values())


def test_the_conformance_table_lists_every_vector_file_with_its_size() -> None:
    import json

    rows = re.findall(r"^\| `([a-z0-9_]+\.json)` \| (\d+) \|", section("13. Conformance"), re.M)
    files = sorted(p.name for p in (ROOT / "tests" / "vectors").glob("*.json"))
    assert sorted(name for name, _ in rows) == files
    for name, count in rows:
        assert len(json.loads((ROOT / "tests" / "vectors" / name).read_text())) == int(count), name


@pytest.mark.micropython
@pytest.mark.timeout(60)
def test_a_client_written_from_the_document_alone_works_with_a_virtual_board() -> None:
    """tests/core/doc_client.py (standard library only) against the firmware, auth on, over UDP and
    serial at once: boot HELLO for a refused frame, handshake, first contact, bursts; every frame
    verifies, every event offset comes once, in order; the two links' sessions are independent."""
    from leadwire.tools.board import start_board

    from .doc_client import HELLO, DocClient, Serial, Udp, ctx

    cfg = {"sensors": [{"ch": 1, "hz": 200, "size": 16}], "health": {"ms": 0}}
    with start_board("both", key="auto", config=cfg) as b:
        assert b.address and b.port and b.key
        key = bytes.fromhex(b.key)
        clients = [DocClient(Udp(b.address), key), DocClient(Serial(b.port), key)]
        try:
            for c in clients:  # section 9.5, on each link before its handshake
                f = c.boot_hello_for_unsigned_poll()
                assert f.tag == 0 and f.payload[-4:] == bytes(4) and f.verifies(key, ctx(1, f.seq, 0, 0))
            for c in clients:
                c.handshake()
            assert [c.k for c in clients] == [1, 1]  # section 9.4: a session per link
            assert clients[0].epoch == clients[1].epoch
            starts = [c.first_contact()[0] for c in clients]
            time.sleep(0.3)
            for _ in range(3):
                for c in clients:  # interleaved: each link's session goes on by itself
                    c.drain(40)
                time.sleep(0.1)
            for c, n0 in zip(clients, starts, strict=True):
                assert c.lost == 0 and len(c.offsets) > 40
                assert c.offsets == [(n0 + i) & 0xFFFFFFFF for i in range(len(c.offsets))]
            # a HELLO answer again on UDP starts session 2 there; serial keeps its session 1
            clients[0].handshake()
            assert clients[0].k == 2 and clients[1].poll(1, 100, 1)[0].type != HELLO
        finally:
            for c in clients:
                c.link.close()
        assert "agent:" not in b.console()
