"""Frame codec, COBS framing and the golden vectors (host implementations and device fallbacks)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cobs import cobs
from hypothesis import given, settings
from hypothesis import strategies as st

from leadwire import codec, framing, messages, wire
from leadwire.bufcopy import copy_py
from leadwire.crc16 import crc16, crc16_py

VEC = Path(__file__).parents[1] / "vectors"


def load(name: str) -> list[dict]:
    return json.loads((VEC / name).read_text())


def test_vectors_are_what_the_generator_writes() -> None:
    """The committed vectors are reproducible from the host implementations."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_vectors", VEC / "make_vectors.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for name in mod.ALL:
        assert (VEC / name).read_text() == mod.render(name), name


def test_crc_check_value_and_vectors_both_implementations() -> None:
    assert crc16(b"123456789", 0, 9) == 0x29B1
    for v in load("crc16.json"):
        d = bytes.fromhex(v["data"])
        assert crc16(d, 0, len(d)) == v["crc"]
        assert crc16_py(d, 0, len(d)) == v["crc"]  # the device's bytecode fallback


def test_cobs_device_encoder_and_decoder_match_the_cobs_package() -> None:
    for v in load("cobs.json"):
        raw, enc = bytes.fromhex(v["raw"]), bytes.fromhex(v["encoded"])
        assert cobs.encode(raw) + b"\x00" == enc
        out = bytearray(framing.max_encoded(len(raw)))
        end = framing.encode_into(raw, len(raw), out)
        assert bytes(out[:end]) + b"\x00" == enc
        buf = bytearray(enc[:-1])
        m = framing.decode_in_place(buf, len(buf))
        assert bytes(buf[:m]) == raw


@given(st.binary(max_size=1200))
def test_cobs_device_encoder_equals_package_on_random_data(raw: bytes) -> None:
    out = bytearray(framing.max_encoded(len(raw)))
    end = framing.encode_into(raw, len(raw), out)
    assert bytes(out[:end]) == cobs.encode(raw)
    buf = bytearray(out[:end])
    assert bytes(buf[: framing.decode_in_place(buf, end)]) == raw


def test_frame_vectors_encode_and_decode() -> None:
    for v in load("frames.json"):
        f = codec.Frame(
            v["type"], v["seq"], bytes.fromhex(v["payload"]), v["channel"], v["priority"], v["flags"],
            v["message_id"], v["index"],
        )  # fmt: skip
        assert codec.encode(f).hex() == v["encoded"]
        assert codec.decode(bytes.fromhex(v["encoded"])) == f


def test_overhead_is_12_bytes() -> None:
    assert wire.OVERHEAD == 12
    for n in (0, 1, 64, 2047):
        assert len(codec.encode(codec.Frame(wire.NOTIFY, 1, bytes(n)))) == n + 12


def test_bad_frames_give_their_error_code() -> None:
    for v in load("bad_frames.json"):
        with pytest.raises(wire.WireError) as e:
            codec.decode(bytes.fromhex(v["data"]))
        assert e.value.code == v["code"], v["name"]
        assert codec.error_name(e.value.code) == v["name"] or v["name"] == "empty"


def test_auth_flag_needs_its_trailer_and_reserved_flags_are_refused() -> None:
    f = codec.Frame(wire.POLL, 1, b"\x00\x01\x00\x10", flags=wire.F_LAST | wire.F_AUTH)
    with pytest.raises(wire.WireError) as e:
        codec.decode(codec.encode(f))  # F_AUTH without the 8-byte trailer: the length is wrong
    assert e.value.code == wire.E_LENGTH
    f = codec.Frame(wire.POLL, 1, b"\x00\x01\x00\x10", flags=wire.F_LAST | 4)
    with pytest.raises(wire.WireError) as e:
        codec.decode(codec.encode(f))
    assert e.value.code == wire.E_FLAGS


def test_encode_rejects_values_that_do_not_fit() -> None:
    for bad in [
        codec.Frame(0),
        codec.Frame(wire.POLL, 2**32),
        codec.Frame(wire.POLL, payload=bytes(2048)),
        codec.Frame(wire.POLL, priority=16),
        codec.Frame(wire.POLL, channel=256),
        codec.Frame(wire.POLL, index=32),
    ]:
        with pytest.raises(ValueError):
            codec.encode(bad)


frames_st = st.builds(
    codec.Frame,
    st.integers(1, wire.MAX_TYPE),
    st.integers(0, 2**32 - 1),
    st.binary(max_size=300),
    st.integers(0, 255),
    st.integers(0, 15),
    st.sampled_from([0, wire.F_LAST]),
    st.integers(0, 255),
    st.integers(0, 31),
)


@given(frames_st)
def test_decode_inverts_encode(f: codec.Frame) -> None:
    assert codec.decode(codec.encode(f)) == f


@settings(max_examples=2000)
@given(st.binary(max_size=80))
def test_random_bytes_give_a_frame_or_only_wire_error(data: bytes) -> None:
    try:
        codec.decode(data)
    except wire.WireError:
        pass


@settings(max_examples=500)
@given(frames_st, st.integers(0, 200), st.integers(0, 7))
def test_single_bit_flips_are_always_caught(f: codec.Frame, pos: int, bit: int) -> None:
    data = bytearray(codec.encode(f))
    data[pos % len(data)] ^= 1 << bit
    with pytest.raises(wire.WireError):
        codec.decode(bytes(data))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(frames_st, min_size=1, max_size=6),
    st.lists(st.binary(max_size=30), min_size=1, max_size=6),
    st.integers(1, 50),
)
def test_stream_decoder_resynchronises_after_garbage(
    fs: list[codec.Frame], garbage: list[bytes], chunk: int
) -> None:
    """Garbage between frames costs at most one error per garbage run; every frame arrives."""
    stream = b""
    for f, g in zip(fs, garbage * len(fs), strict=False):
        stream += g.replace(b"\x00", b"") + b"\x00" + framing.encode(codec.encode(f))
    d = framing.StreamDecoder()
    got: list = []
    for i in range(0, len(stream), chunk):
        got += d.feed(stream[i : i + chunk])
    assert [x for x in got if isinstance(x, codec.Frame)] == fs
    assert all(isinstance(x, (codec.Frame, wire.WireError)) for x in got)
    assert d.errors == len(got) - len(fs) <= len(fs)


@settings(max_examples=500)
@given(st.binary(max_size=300))
def test_stream_decoder_on_random_bytes_only_yields_typed_errors(data: bytes) -> None:
    for item in framing.StreamDecoder(256).feed(data):
        assert isinstance(item, (codec.Frame, wire.WireError))


def test_stream_decoder_oversize_run_is_one_error_then_recovers() -> None:
    d = framing.StreamDecoder(max_frame=32)
    good = framing.encode(codec.encode(codec.Frame(wire.NO_EVENT, 9)))
    got = d.feed(b"\x55" * 500 + b"\x00" + good)
    assert [type(x).__name__ for x in got] == ["WireError", "Frame"]
    assert got[0].code == wire.E_OVERSIZE


def test_copy_fallback() -> None:
    a = bytearray(8)
    copy_py(a, 2, b"abcdef", 1, 3)
    assert bytes(a) == b"\x00\x00bcd\x00\x00\x00"


def test_messages_roundtrip() -> None:
    h = messages.Hello(0xDEADBEEF, 256, 64, 1024, 70000, "id", "0.1.0", "rp2")
    got = messages.decode_hello(codec.decode(codec.encode(messages.hello_frame(h))))
    assert got.boots == 70000 & 0xFFFF and got.board_id == "id" and got.boot_epoch == 0xDEADBEEF
    assert messages.decode_poll(messages.poll_frame(5, 20, 1000)) == (5, 20, 1000)
    assert messages.decode_recovery(messages.recovery_frame(1, 2)) == (1, 2)
    assert messages.decode_subscribe(messages.subscribe_frame([5, 1, 5])) == [1, 5]
    assert messages.decode_ack(messages.ack_frame(9, 413)) == (9, 413)
    assert messages.decode_error(messages.error_frame(400, "bad")) == (400, "bad")
    recs = [(1, b"a"), (2, b""), (255, bytes(300))]
    assert messages.decode_records(messages.encode_records(recs, 7)) == (7, recs)


@given(st.binary(max_size=60))
def test_payload_decoders_raise_only_wire_error(payload: bytes) -> None:
    f = codec.Frame(wire.HELLO, 0, payload)
    for fn in (
        messages.decode_hello,
        messages.decode_poll,
        messages.decode_recovery,
        messages.decode_subscribe,
        messages.decode_ack,
        messages.decode_error,
    ):
        try:
            fn(f)
        except wire.WireError:
            pass
    try:
        messages.decode_records(payload)
    except wire.WireError:
        pass
