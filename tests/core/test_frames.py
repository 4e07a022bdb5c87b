"""Priority frame queue and reassembly (spec 002)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leadwire.frames import FrameQueue, QueueClosed
from leadwire.reassembly import Reassembler


def drain(q: FrameQueue, names: dict[int, str]) -> list[str]:
    out = []
    while (f := q.pop()) is not None:
        out.append("CLOSE" if f.is_close else "%s%d" % (names[f.message_id], f.index + 1))
    return out


def spec_state() -> tuple[FrameQueue, dict[int, str]]:
    q = FrameQueue(4)
    names = {q.post(b"A" * 12, 0): "A"}  # three frames, priority 0
    names[q.post(b"B" * 8, 5)] = "B"  # two frames, priority 5
    return q, names


def test_spec_002_priority_example() -> None:
    q, names = spec_state()
    assert drain(q, names) == ["A1", "B1", "B2", "A2", "A3"]


def test_spec_002_close_example() -> None:
    q, names = spec_state()
    abandoned = q.close(3)
    assert drain(q, names) == ["A1", "B1", "B2", "CLOSE"]
    assert [names[m] for m in abandoned] == ["A"]
    assert q.closed


def test_frames_carry_fields() -> None:
    q = FrameQueue(4)
    mid = q.post(b"abcdefghij", 7)
    fs = [q.pop() for _ in range(3)]
    assert [(f.message_id, f.index, f.last, f.priority, f.data, f.is_close) for f in fs] == [
        (mid, 0, False, 7, b"abcd", False),
        (mid, 1, False, 7, b"efgh", False),
        (mid, 2, True, 7, b"ij", False),
    ]
    assert q.pop() is None


def test_a_message_is_held_once_its_fragments_are_views_into_it() -> None:
    # a board keeps a report's fragments for resends: copies of the pieces cost it ~1 KB of heap
    # per report in flight (tests/hil: the push heap budget)
    q = FrameQueue(4)
    long, short = b"abcdefghij", b"xyz"
    q.post(long)
    q.post(short)
    fs = [q.pop() for _ in range(4)]
    assert all(isinstance(f.data, memoryview) and f.data.obj is long for f in fs[:3])
    assert [bytes(f.data) for f in fs[:3]] == [b"abcd", b"efgh", b"ij"]
    assert fs[3].data is short  # one fragment: the message itself
    q.post(bytearray(b"uvw"))
    assert type(q.pop().data) is bytes  # a copy (the caller may change its bytearray)


def test_empty_message_is_one_frame() -> None:
    q = FrameQueue(4)
    q.post(b"")
    f = q.pop()
    assert f is not None and f.last and f.data == b""


def test_close_respects_fifo_among_equal_priority() -> None:
    q = FrameQueue(2)
    names = {q.post(b"aaaa", 2): "A", q.post(b"bbbb", 2): "B"}
    q.close(2)
    assert drain(q, names) == ["A1", "A2", "B1", "B2", "CLOSE"]


def test_post_after_close_is_refused_until_reopen() -> None:
    q = FrameQueue(4)
    q.close()
    with pytest.raises(QueueClosed):
        q.post(b"x")
    with pytest.raises(QueueClosed):
        q.close()
    q.reopen()
    q.post(b"x")
    assert len(q) == 1


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        FrameQueue(0)
    q = FrameQueue(1)
    with pytest.raises(ValueError):
        q.post(b"x", 16)
    with pytest.raises(ValueError):
        q.post(b"x" * 33)  # 33 fragments: the wire's index has 5 bits


def test_reassembler_discards_partial_messages_on_close() -> None:
    q, _ = spec_state()
    q.close(3)
    r = Reassembler()
    out = [m for f in iter(q.pop, None) if (m := r.feed(f)) is not None]
    assert [(m.is_close, m.data) for m in out] == [(False, b"B" * 8), (True, b"")]
    assert r.abandoned == 1 and r.in_flight == 0 and r.buffered == 0


def test_reassembler_bounds_memory_and_counts_drops() -> None:
    q = FrameQueue(4)
    r = Reassembler(max_messages=2, max_bytes=100)
    for _ in range(3):
        q.post(b"x" * 8)  # 2 frames each; fed interleaved below
    frames = [q.pop() for _ in range(6)]
    firsts = [f for f in frames if f is not None and f.index == 0]
    for f in firsts:
        r.feed(f)
    assert r.in_flight == 2 and r.dropped == 1
    # a fragment out of sequence drops its message
    r2 = Reassembler()
    q2 = FrameQueue(2)
    q2.post(b"abcdef")
    f0, _, f2 = q2.pop(), q2.pop(), q2.pop()
    assert r2.feed(f0) is None and r2.feed(f2) is None
    assert r2.dropped == 1 and r2.in_flight == 0


ops = st.lists(
    st.one_of(
        st.tuples(st.just("post"), st.binary(max_size=40), st.integers(0, 15)),
        st.tuples(st.just("pop"), st.integers(1, 5)),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(frame_size=st.integers(1, 8), script=ops, close_prio=st.one_of(st.none(), st.integers(0, 15)))
def test_every_non_abandoned_message_arrives_intact(
    frame_size: int, script: list[tuple], close_prio: int | None
) -> None:
    q = FrameQueue(frame_size)
    r = Reassembler(max_messages=64, max_bytes=1 << 20)
    posted: dict[int, bytes] = {}
    got: dict[int, bytes] = {}
    order: list[int] = []

    def feed(f) -> None:  # type: ignore[no-untyped-def]
        m = r.feed(f)
        if m is not None and not m.is_close:
            got[m.message_id] = m.data
            order.append(m.message_id)

    for op in script:
        if op[0] == "post":
            if len(op[1]) > frame_size * 32:
                continue
            posted[q.post(op[1], op[2])] = op[1]
        else:
            for _ in range(op[1]):
                if (f := q.pop()) is not None:
                    feed(f)
    abandoned = q.close(close_prio) if close_prio is not None else []
    while (f := q.pop()) is not None:
        feed(f)
    assert set(got) | set(abandoned) == set(posted)
    assert not set(got) & set(abandoned)
    for mid, data in got.items():
        assert data == posted[mid]
    assert r.dropped == 0
