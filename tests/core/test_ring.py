"""Event ring (spec 004): the server side of the client table, case by case."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leadwire import codec, messages, wire
from leadwire.ring import EVENT, NO_EVENT, RECOVERY
from leadwire.ring_host import HostRing

TOP = 0xFFFFFFFF


def test_first_offset_is_start_and_successors_follow() -> None:
    r = HostRing(4, start=10)
    assert [r.append(b"x") for _ in range(3)] == [10, 11, 12]


def test_random_start_offsets_differ_between_boots() -> None:
    starts = {HostRing(4).append(b"x") for _ in range(20)}
    assert len(starts) > 15  # 20 draws from 2^32: a collision is ~5e-8 likely


def test_case_1_event_s_n() -> None:
    r = HostRing(4, start=10)
    for p in (b"a", b"b", b"c"):
        r.append(p)
    assert r.poll(9) == (EVENT, 10, b"a")
    assert r.poll(10) == (EVENT, 11, b"b")
    assert r.poll(11) == (EVENT, 12, b"c")


def test_case_2_newest_gives_no_event() -> None:
    r = HostRing(4, start=10)
    r.append(b"a")
    assert r.poll(10) == (NO_EVENT, 10)


def test_case_3_recovery_after_overrun_with_exact_range() -> None:
    r = HostRing(4, start=100)
    for i in range(10):  # offsets 100..109, ring keeps 106..109
        r.append(bytes([i]))
    assert r.poll(101) == (RECOVERY, 106, 109)
    assert r.overwritten == 6
    # client recovers by polling with n0 - 1; the lost events are s(101)..105 = 4 events
    assert r.poll(105) == (EVENT, 106, bytes([6]))
    assert (106 - (101 + 1)) == 4


def test_case_3_for_offsets_ahead_of_the_newest() -> None:
    r = HostRing(4, start=100)
    r.append(b"a")
    assert r.poll(500) == (RECOVERY, 100, 100)


def test_empty_ring_answers_no_event() -> None:
    """Just booted: nothing to recover to (documented in ring.py and docs/protocol.md)."""
    r = HostRing(4, start=77)
    assert r.poll(0) == (NO_EVENT, 0)
    assert r.poll(76) == (NO_EVENT, 76)


def test_client_offset_zero_before_any_event_gets_recovery() -> None:
    r = HostRing(8, start=1000)
    r.append(b"a")
    assert r.poll(0) == (RECOVERY, 1000, 1000)


def test_wrap_from_2_32_minus_1_to_0() -> None:
    r = HostRing(4, start=TOP - 1)
    assert [r.append(bytes([i])) for i in range(4)] == [TOP - 1, TOP, 0, 1]
    assert r.poll(TOP - 2) == (EVENT, TOP - 1, b"\x00")
    assert r.poll(TOP) == (EVENT, 0, b"\x02")
    assert r.poll(0) == (EVENT, 1, b"\x03")
    assert r.poll(1) == (NO_EVENT, 1)
    r.append(b"\x04")  # evicts TOP - 1
    assert r.poll(TOP - 2) == (RECOVERY, TOP, 2)


def test_batch_by_count_and_bytes() -> None:
    r = HostRing(16, start=0, slot_size=10)
    for i in range(10):
        r.append(bytes([i]) * 10, channel=i % 2)
    kind, first, recs = r.poll_batch(2, max_events=3)
    assert (kind, first) == (EVENT, 3)
    assert recs == [(1, b"\x03" * 10), (0, b"\x04" * 10), (1, b"\x05" * 10)]
    # budget: batch head 3 + records of 13 bytes each -> 2 records fit in 30 bytes
    assert len(r.poll_batch(2, max_bytes=30)[2]) == 2
    # one event always goes, even over budget
    assert len(r.poll_batch(2, max_bytes=1)[2]) == 1


def test_answer_into_matches_poll_batch_and_reports_backlog() -> None:
    r = HostRing(16, start=TOP - 3, slot_size=8)
    for i in range(12):
        r.write(bytes([i, i]), i % 3)
    buf = bytearray(wire.OVERHEAD + 2047)
    n = (TOP - 3) & TOP  # the client has the first event
    size = r.answer_into(buf, n >> 16, n & 0xFFFF, 5, 2047)
    f = codec.decode(bytes(buf[:size]))
    assert f.type == wire.EVENTS and f.seq == TOP - 2
    backlog, recs = messages.decode_records(f.payload)
    assert recs == r.poll_batch(n, max_events=5)[2]
    assert backlog == 11 - 5
    assert size == wire.OVERHEAD + 3 + 5 * (3 + 2)


def test_answer_into_reports_where_a_burst_goes_on() -> None:
    r = HostRing(16, start=0xFFFFFFFE, slot_size=4)
    for _ in range(10):
        r.write(b"ab")
    buf = bytearray(256)
    n = 0xFFFFFFFD
    size = r.answer_into(buf, n >> 16, n & 0xFFFF, 3, 2047, 7, 5)
    f = codec.decode(bytes(buf[:size]))
    assert (f.message_id, f.index, f.seq) == (7, 5, 0xFFFFFFFE)
    assert (r.last_hi << 16 | r.last_lo, r.backlog) == (0, 7)  # carried 0xFFFFFFFE, 0xFFFFFFFF, 0
    r.answer_into(buf, r.last_hi, r.last_lo, 100, 2047)
    assert (r.last_hi << 16 | r.last_lo, r.backlog) == (7, 0)
    r.answer_into(buf, 0, 7, 100, 2047)  # NO_EVENT
    assert r.backlog == 0


def test_a_recovery_asked_to_go_on_leaves_the_burst_at_n0_minus_1() -> None:
    r = HostRing(4, start=0xFFFF0000 - 6, slot_size=4)  # n0 - 1 crosses a 16-bit half
    for _ in range(10):
        r.write(b"ab")  # 0xFFFEFFFA..0xFFFF0003; held 0xFFFF0000..0xFFFF0003
    buf = bytearray(256)
    size = r.answer_into(buf, 0, 5, 3, 2047, 7, 0, 1)
    f = codec.decode(bytes(buf[:size]))
    assert (f.type, f.flags, f.seq, messages.decode_recovery(f)) == (
        wire.RECOVERY, 0, 0xFFFF0000, (0xFFFF0000, 0xFFFF0003))  # fmt: skip
    assert (r.last_hi << 16 | r.last_lo, r.backlog) == (0xFFFEFFFF, 4)
    size = r.answer_into(buf, r.last_hi, r.last_lo, 3, 2047, 7, 1)
    f = codec.decode(bytes(buf[:size]))
    assert (f.type, f.index, f.seq) == (wire.EVENTS, 1, 0xFFFF0000)
    assert len(messages.decode_records(f.payload)[1]) == 3
    size = r.answer_into(buf, 0, 5, 3, 2047, 7, 0)  # not asked: the whole answer
    f = codec.decode(bytes(buf[:size]))
    assert f.type == wire.RECOVERY and f.flags == wire.F_LAST and r.backlog == 0


def test_answer_into_recovery_and_no_event_frames() -> None:
    r = HostRing(4, start=100)
    for _ in range(10):
        r.write(b"x")
    buf = bytearray(64)
    f = codec.decode(bytes(buf[: r.answer_into(buf, 0, 101, 1, 100)]))
    assert f.type == wire.RECOVERY and messages.decode_recovery(f) == (106, 109)
    f = codec.decode(bytes(buf[: r.answer_into(buf, 0, 109, 1, 100)]))
    assert f.type == wire.NO_EVENT and f.seq == 109 and f.payload == b""


def test_bad_construction_and_oversize_event() -> None:
    with pytest.raises(ValueError):
        HostRing(0)
    with pytest.raises(ValueError):
        HostRing(65536)
    r = HostRing(2, slot_size=4)
    with pytest.raises(ValueError):
        r.write(b"12345")


@settings(max_examples=200, deadline=None)
@given(
    capacity=st.integers(1, 12),
    start=st.integers(0, TOP),
    appends=st.integers(0, 40),
    probe=st.integers(-20, 60),
)
def test_poll_matches_reference_model(capacity: int, start: int, appends: int, probe: int) -> None:
    """poll() agrees with a plain list model of the spec 004 table, across the wrap."""
    r = HostRing(capacity, start=start, slot_size=2)
    held: list[tuple[int, bytes]] = []
    for i in range(appends):
        off = r.append(bytes([i % 256]))
        held = ([*held, (off, bytes([i % 256]))])[-capacity:]
    n = (start + probe) & TOP
    offsets = [o for o, _ in held]
    if (n + 1) & TOP in offsets:
        expected = (EVENT, (n + 1) & TOP, dict(held)[(n + 1) & TOP])
    elif not held or n in offsets:
        expected = (NO_EVENT, n)
    else:
        expected = (RECOVERY, offsets[0], offsets[-1])
    assert r.poll(n) == expected


def test_hot_path_never_builds_ints_of_2_30_or_more() -> None:
    """32-bit ports box ints >= 2^30 (a heap allocation). Trace every local and attribute the hot
    path touches while offsets run across the 2^32 wrap: all must stay below 2^30."""
    r = HostRing(8, start=TOP - 5, slot_size=4)
    buf = bytearray(128)
    seen: list[int] = []
    hot = {"write", "write_samples", "_classify", "answer_into", "_events_into"}
    hot |= {"_recovery_into"}
    hot |= {"put_header", "seal"}

    def tracer(frame, event, arg):  # type: ignore[no-untyped-def]
        if frame.f_code.co_name in hot:
            for v in frame.f_locals.values():
                if isinstance(v, int) and not isinstance(v, bool):
                    seen.append(v)
            return tracer
        return None

    sys.settrace(tracer)
    try:
        hi, lo = 0xFFFF, 0xFFF9
        for _ in range(20):
            r.write(b"ab", 1)
            r.answer_into(buf, hi, lo, 3, 100)
            r.answer_into(buf, 0, 0, 3, 100)
            hi, lo = r._hi, (r._lo - 1) & 0xFFFF
    finally:
        sys.settrace(None)
    state = [r._hi, r._lo, r._d, r._head, r.count, r.overwritten]
    assert seen and max(abs(v) for v in seen + state) < 2**30
    assert r.newest() == (TOP - 5 + 20 - 1) & TOP


def _by_writes(r: HostRing, payload: bytes, channel: int, n: int, count: int, number: int) -> None:
    data = bytearray(payload)
    for i in range(count):
        data[0] = ((number + i) >> 8) & 0xFF
        data[1] = (number + i) & 0xFF
        r.write(data, channel, n)


def _state(r: HostRing) -> tuple[object, ...]:
    return (bytes(r._store), r._head, r._hi, r._lo, r.count, r.overwritten, r.newest(), r.oldest())


@settings(max_examples=200, deadline=None)
@given(
    capacity=st.integers(1, 9),
    start=st.sampled_from([0, 5, 0xFFFF - 3, 0xFFFFFFFF - 6, 0x1234FFFE]),
    before=st.integers(0, 20),
    batches=st.lists(st.integers(0, 25), min_size=1, max_size=4),
    n=st.integers(2, 6),
    number=st.sampled_from([0, 7, 0xFFFE]),
)
def test_write_samples_equals_one_write_per_event(
    capacity: int, start: int, before: int, batches: list[int], n: int, number: int
) -> None:
    # the sensor's batch write leaves the ring byte for byte as `count` write() calls would: store,
    # offsets (across the 2^16 half and 2^32 wraps), count, overwritten; and answers the same
    payload = bytes(range(0x40, 0x46))
    a = HostRing(capacity, start, 6)
    b = HostRing(capacity, start, 6)
    for r in (a, b):
        for _ in range(before):
            r.write(b"zz", 3)
    for count in batches:
        count = min(count, capacity)
        a.write_samples(payload, 1, n, count, number)
        _by_writes(b, payload, 1, n, count, number)
        assert _state(a) == _state(b)
        number = (number + count) & 0xFFFF
    ba, bb = bytearray(200), bytearray(200)
    for back in range(capacity + 2):
        q = (a.newest() - back) & TOP
        hi, lo = q >> 16, q & 0xFFFF
        assert a.answer_into(ba, hi, lo, 255, 2047) == b.answer_into(bb, hi, lo, 255, 2047)
        assert ba == bb


def test_write_samples_saturates_overwritten() -> None:
    r = HostRing(4, 0, 4)
    r._st[4] = 0x3FFFFFFF - 3  # overwritten (ring._SOVER)
    for i in range(5):
        r.write_samples(b"abcd", 1, 4, 4, 4 * i)
    assert (r.count, r.overwritten, r.newest()) == (4, 0x3FFFFFFF, 19)
    assert r.poll(18) == (EVENT, 19, b"\x00\x13cd")
