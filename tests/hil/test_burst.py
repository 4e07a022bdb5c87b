"""Burst answers on the wire: one POLL asking for up to max_frames EVENTS frames, sent back to
back, each going on from the last offset of the one before, numbered 0..k-1 by the header's
fragment index; a burst stops early when the ring has no more. Against virtual boards (UDP and
serial) or a real board."""

from __future__ import annotations

import time

import pytest

from leadwire import messages, wire
from leadwire.client import EVENTS, RECOVER, PollClient
from leadwire.codec import Frame
from leadwire.tools.wireclient import Client
from leadwire.u32 import add

from .conftest import Dut
from .test_hil import Open, first_range

pytestmark = [pytest.mark.micropython, pytest.mark.timeout(60)]
ANSWERS = [wire.EVENTS, wire.NO_EVENT, wire.RECOVERY]


def burst(
    c: Client, n: int, max_events: int, max_frames: int, timeout: float = 2.0, quiet: float = 0.3
) -> list[Frame]:
    """Send one POLL(n) asking for a burst; every answer frame to it, until the link is quiet."""
    c.tag = (c.tag + 1) & 0xFF
    c.stash.clear()
    c.send(messages.poll_frame(n, max_events, wire.MAX_PAYLOAD, c.tag, max_frames))
    out: list[Frame] = []
    end = time.monotonic() + timeout
    while True:
        f = c.recv(ANSWERS, quiet if out else end - time.monotonic())
        if f is None:
            return out
        if f.message_id == c.tag:
            out.append(f)


def records(f: Frame) -> tuple[int, list[tuple[int, bytes]]]:
    assert f.type == wire.EVENTS, f
    return messages.decode_records(f.payload)


def slow_board(open_dut: Open, transport: str) -> tuple[Dut, int]:
    """A board whose ring moves slowly (one 20 Hz channel, no health), with ~1.5 s of events held.
    Nothing changes the ring while it answers one POLL (no await between the frames of a burst):
    every figure below is exact."""
    d = open_dut(transport, sensors=[{"ch": 1, "hz": 20, "size": 16}], health={"ms": 0})
    d.sleep(1.5)
    n0, _ = first_range(d.client)
    return d, n0


def test_burst_of_k_frames_carries_exactly_the_next_offsets(open_dut: Open, transport: str) -> None:
    d, n0 = slow_board(open_dut, transport)
    frames = burst(d.client, add(n0, -1), 4, 3, 2 * d.slow, 0.3 * d.slow)
    assert [f.index for f in frames] == [0, 1, 2]  # exactly k frames, numbered 0..k-1
    assert {f.message_id for f in frames} == {d.client.tag}  # each echoes the poll's tag
    offsets: list[int] = []
    samples: list[int] = []
    backlogs: list[int] = []
    for f in frames:
        backlog, recs = records(f)
        assert len(recs) == 4 and f.seq == add(n0, len(offsets))  # goes on from the frame before
        offsets += [add(f.seq, i) for i in range(len(recs))]
        samples += [messages.decode_sample(data)[0] for ch, data in recs]
        backlogs.append(backlog)
    assert offsets == [add(n0, i) for i in range(12)]
    assert samples == [(samples[0] + i) & 0xFFFF for i in range(12)]  # no event skipped or repeated
    assert backlogs == [backlogs[0], backlogs[0] - 4, backlogs[0] - 8] and backlogs[2] > 0


def test_burst_stops_when_the_ring_runs_dry(open_dut: Open, transport: str) -> None:
    d, n0 = slow_board(open_dut, transport)
    frames = burst(d.client, add(n0, -1), 4, 32, 2 * d.slow, 0.3 * d.slow)
    counts = [len(records(f)[1]) for f in frames]
    held = counts[0] + records(frames[0])[0]  # what the ring held after n0 - 1 when it answered
    assert 20 <= held < 4 * 32  # ~30 events: the burst ends before its 32 frames
    assert [f.index for f in frames] == list(range(len(frames)))
    assert counts == [4] * (held // 4) + ([held % 4] if held % 4 else [])
    assert records(frames[-1])[0] == 0  # the last frame says the ring has no more
    assert [f.seq for f in frames] == [add(n0, 4 * i) for i in range(len(frames))]
    # caught up: a burst from the newest offset is one NO_EVENT
    last = add(frames[-1].seq, counts[-1] - 1)
    again = burst(d.client, last, 4, 32, 2 * d.slow, 0.3 * d.slow)
    assert again[0].type in (wire.NO_EVENT, wire.EVENTS)
    if again[0].type == wire.NO_EVENT:  # (an event may have come in between: then EVENTS)
        assert len(again) == 1 and again[0].seq == last and again[0].index == 0


def test_burst_from_outside_the_ring_is_one_recovery(open_dut: Open, transport: str) -> None:
    d, n0 = slow_board(open_dut, transport)
    frames = burst(d.client, add(n0, -1000), 4, 8, 2 * d.slow, 0.3 * d.slow)
    assert [(f.type, f.index) for f in frames] == [(wire.RECOVERY, 0)]


def test_poll_client_with_bursts_receives_everything(open_dut: Open, transport: str) -> None:
    """The core's PollClient with bursts of 8 frames against a board at ~1,050 events/s (the
    emulated Pico: 300/s, for 3 s of its clock): every event from first contact on arrives once, in
    order, none lost (per-channel sample numbers have no gap), and one round trip carries several
    frames."""
    sensors = [{"ch": 1, "hz": 1000, "size": 16}, {"ch": 2, "hz": 50, "size": 12}]
    d = open_dut(transport, sensors=sensors, health={"ms": 0})
    c = d.client
    pc = PollClient()
    got: list[tuple[int, int, bytes]] = []
    polls = frames = 0
    end = d.now() + 3.0
    while d.now() < end:
        c.send(pc.next_request(255, wire.MAX_PAYLOAD, 8))
        polls += 1
        while not pc.burst_done:
            f = c.recv([wire.HELLO, *ANSWERS], 1.0 * d.slow)
            if f is None:
                pc.on_timeout()
                break
            frames += 1
            kind, data = pc.on_frame(f)
            if kind == EVENTS:
                got += data
            elif kind == RECOVER:
                assert data.cause == "first_contact", data  # the only recovery: nothing overran
    assert pc.lost == 0 and pc.unknown_losses == 0 and pc.transport_errors == 0
    assert pc.received == len(got) > (2000 if d.pace == 1 else 600)
    offsets = [o for o, _, _ in got]
    assert offsets == [add(offsets[0], i) for i in range(len(offsets))]  # consecutive, once each
    for ch in (1, 2):
        s = [messages.decode_sample(data)[0] for _, c_, data in got if c_ == ch]
        assert s == [(s[0] + i) & 0xFFFF for i in range(len(s))], ch  # nothing skipped
    assert frames > polls  # bursts: more answer frames than requests
