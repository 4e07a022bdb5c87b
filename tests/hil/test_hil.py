"""The agent on the wire: HELLO, spec 004 polling, spec 003 push sessions, spec 002 priorities,
bad frames, restarts and heap, against virtual boards (UDP and serial) or a real board."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from leadwire import codec, messages, wire
from leadwire.client import PollClient
from leadwire.codec import Frame
from leadwire.tools.wireclient import Client, SerialLink
from leadwire.u32 import add, distance

from .conftest import Dut

pytestmark = [pytest.mark.micropython, pytest.mark.timeout(60)]
Open = Callable[..., Dut]
RECORD = 3  # record header: channel u8, length u16


def first_range(c: Client, timeout: float = 3.0) -> tuple[int, int]:
    """Poll with n = 0 until the ring answers RECOVERY (n0, n1): first contact (spec 004 case 3)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        f = c.poll(0)
        if f.type == wire.RECOVERY:
            return messages.decode_recovery(f)
        time.sleep(0.05)  # NO_EVENT: nothing generated yet
    raise AssertionError("no RECOVERY from a fresh board")


def catch_up(
    c: Client, n: int, max_events: int = 255, jump: bool = False, enough: int | None = None
) -> tuple[int, list[tuple[int, int, bytes]]]:
    """Poll in batches from n until NO_EVENT; returns the new n and [(offset, channel, data)].
    With `jump`, a RECOVERY (the oldest event went while we asked for it) restarts from n0 - 1.
    With `enough`, stop once that many events are in (on the emulated Pico a poll's round trip can
    outlast the sample interval, so a NO_EVENT may never come)."""
    got: list[tuple[int, int, bytes]] = []
    for _ in range(1000):
        if enough is not None and len(got) >= enough:
            return n, got
        f = c.poll(n, max_events)
        if f.type == wire.NO_EVENT:
            assert f.seq == n
            return n, got
        if jump and f.type == wire.RECOVERY:
            n = add(messages.decode_recovery(f)[0], 3)  # a little ahead: the ring is moving
            continue
        assert f.type == wire.EVENTS, f
        assert f.seq == add(n, 1)
        _, recs = messages.decode_records(f.payload)
        for i, (ch, data) in enumerate(recs):
            got.append((add(f.seq, i), ch, data))
        n = add(f.seq, len(recs) - 1)
    raise AssertionError("never caught up")


def report(c: Client, channel: int, timeout: float = 3.0) -> tuple[Frame, bytes, list[bytes]]:
    """The next complete NOTIFY report on `channel`: (first fragment, body, raw fragment bytes)."""
    end = time.monotonic() + timeout
    parts: dict[int, list[Frame]] = {}
    while time.monotonic() < end:
        f = c.recv([wire.NOTIFY], end - time.monotonic())
        if f is None:
            break
        if f.channel != channel:
            continue
        if f.index == 0:
            parts[f.message_id] = [f]
        elif f.message_id in parts and parts[f.message_id][-1].index == f.index - 1:
            parts[f.message_id].append(f)
        else:
            continue
        if f.last:
            frs = parts.pop(f.message_id)
            assert len({x.seq for x in frs}) == 1  # one MessageNumber per report
            raw = [codec.encode(x) for x in frs]
            return frs[0], b"".join(x.payload for x in frs), raw
    raise AssertionError("no complete report on channel %d" % channel)


def subscribe(c: Client, channels: list[int]) -> None:
    c.send(messages.subscribe_frame(channels))
    ack = c.recv([wire.ACK])
    assert ack is not None and messages.decode_ack(ack) == (0, 200)


# -- HELLO, boot epoch, restart -------------------------------------------------------------


def test_hello_after_boot_and_on_request(open_dut: Open, transport: str) -> None:
    d = open_dut(transport)
    c = d.client
    if d.virtual:
        boot = c.recv([wire.HELLO], timeout=3)  # sent after boot, unasked
        assert boot is not None
        h0 = messages.decode_hello(boot)
        assert (h0.boots, h0.board, h0.firmware, h0.board_id) == (1, d.kind, "0.1.0", "hil-1")
    h = c.hello()
    assert (h.capacity, h.slot_size) == (256, 16)
    assert h.frame_size == (256 if transport.endswith("udp") else 128)
    if d.virtual:
        assert h == h0  # same boot: same epoch, same fields
        assert c.hello() == h


def drive(c: Client, pc: PollClient, until: Callable[[str], bool], timeout: float = 10.0) -> None:
    """Run the core's PollClient against the board until `until(kind)` holds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        c.send(pc.next_request(255))
        f = c.recv([wire.HELLO, wire.EVENTS, wire.NO_EVENT, wire.RECOVERY], 1.0)
        if f is None:
            pc.on_timeout()
            continue
        kind, _ = pc.on_frame(f)
        if until(kind):
            return
    raise AssertionError("PollClient never got there")


def test_restart_detected_with_new_epoch_and_offsets(open_dut: Open, transport: str) -> None:
    d = open_dut(transport)
    c = d.client
    h1 = c.hello()
    pc = PollClient()
    # caught up: a NO_EVENT. On the emulated Pico a poll's round trip can outlast the 20 ms between
    # samples (50 Hz), so a NO_EVENT may never come there: events taken from the same boot show the
    # same (the overrun and restart counters below are what the test is about)
    ends = ("nothing", "events") if d.kind == "rp2" else ("nothing",)

    def caught_up(kind: str) -> bool:
        return kind in ends

    drive(c, pc, caught_up, 10 * d.slow)  # handshake, first contact, caught up
    assert pc.epoch == h1.boot_epoch and pc.restarts == 0
    n_before = pc.n
    d.restart()
    h2 = c.hello()
    assert h2.boot_epoch != h1.boot_epoch
    assert h2.boots == h1.boots + 1
    d.sleep(0.3)  # the new boot generates events: a restart is detectable (spec 004)
    drive(c, pc, lambda kind: kind == "recover", 10 * d.slow)
    assert pc.restarts == 1 and pc.unknown_losses == 1
    assert pc.loss is not None and pc.loss.cause == "restart" and pc.loss.lost is None
    # a new random start: the old offset is not in the new boot's range
    assert not distance(n_before, pc.loss.n0) <= distance(pc.loss.n1, pc.loss.n0)
    drive(c, pc, caught_up, 10 * d.slow)  # the new boot's events, on its clock
    assert pc.lost == 0  # nothing counted as an overrun


# -- polling (spec 004) ---------------------------------------------------------------------


def test_poll_cases_1_2_3(open_dut: Open, transport: str) -> None:
    d = open_dut(transport, sensors=[{"ch": 1, "hz": 2, "size": 16}], health={"ms": 0})
    c = d.client
    n0, n1 = first_range(c)  # case 3: first contact
    f = c.poll(add(n0, -1))  # case 1: event s(n)
    assert (f.type, f.seq) == (wire.EVENTS, n0)
    _, recs = messages.decode_records(f.payload)
    assert len(recs) == 1 and recs[0][0] == 1 and len(recs[0][1]) == 16
    for _ in range(3):  # case 2: n is the newest (an event may land in between: try again)
        _, n1 = messages.decode_recovery(c.poll(0))
        f = c.poll(n1)
        if f.type == wire.NO_EVENT:
            break
    assert (f.type, f.seq) == (wire.NO_EVENT, n1)
    f = c.poll(add(n1, 1000))  # case 3: an offset the ring never had
    assert f.type == wire.RECOVERY
    r0, r1 = messages.decode_recovery(f)
    assert distance(r1, r0) < 256


def test_batched_polls(open_dut: Open, transport: str) -> None:
    # (the Pico's polls take longer on its 115,200-baud UART: slower sensors keep the ring from
    # growing faster than a batch takes from it between two polls)
    slow = {"sensors": [{"ch": 1, "hz": 20, "size": 16}, {"ch": 2, "hz": 5, "size": 12}]}
    d = open_dut(transport, **(slow if transport == "pico" else {}))
    c = d.client
    d.sleep(0.5)
    n0, _ = first_range(c)
    frame = 256 if transport.endswith("udp") else 128
    f = c.poll(add(n0, -1), 255)  # as many as the frame holds
    assert f.type == wire.EVENTS and f.seq == n0
    raw = codec.encode(f)
    backlog, recs = messages.decode_records(f.payload)
    assert len(raw) <= frame
    assert len(raw) + RECORD + 16 > frame  # no room for one more (16-byte events or less)
    # max_events and max_bytes are honoured exactly
    f2 = c.poll(add(n0, -1), 3)
    assert [r for r in messages.decode_records(f2.payload)[1]] == recs[:3]
    sizes = [RECORD + len(r[1]) for r in recs]
    f3 = c.poll(add(n0, -1), 255, 3 + sizes[0] + sizes[1])
    assert messages.decode_records(f3.payload)[1] == recs[:2]
    # records are consecutive offsets: the next batch starts after the last one
    f4 = c.poll(add(n0, len(recs) - 1), 255)
    assert f4.seq == add(n0, len(recs))
    assert backlog >= messages.decode_records(f4.payload)[0]


def test_overrun_recovery_counts_lost_events_exactly(open_dut: Open, transport: str) -> None:
    sensors = [{"ch": 1, "hz": 400, "size": 16}, {"ch": 2, "hz": 100, "size": 12}]
    ring = 256
    if transport.startswith("pico"):  # 50 events/s, which its polls outpace, into a 64-event ring
        sensors, ring = [{"ch": 1, "hz": 40, "size": 16}, {"ch": 2, "hz": 10, "size": 12}], 64
    d = open_dut(transport, sensors=sensors, health={"ms": 0}, ring=ring)
    c = d.client
    n0, _ = first_range(c)
    n, got = catch_up(c, add(n0, -1), jump=True)
    last = {ch: messages.decode_sample(data)[0] for _, ch, data in got}
    assert set(last) == {1, 2}
    d.sleep(1.5 if ring == 256 else 3.0)  # ~750 events into a 256-event ring (Pico: 150 into 64)
    f = c.poll(n)
    assert f.type == wire.RECOVERY
    r0, r1 = messages.decode_recovery(f)
    lost = distance(r0, add(n, 1))
    assert lost > 0 and distance(r1, r0) == ring - 1  # the ring is full
    # the recovery phase: the ring is full and moving (500 ev/s), so poll a little past r0 (the
    # core's chase guard does the same) and count every event between s(n) and the first one
    # received; the per-channel sample numbers say how many were generated, event by event
    f = c.poll(add(r0, 15), 255)
    assert f.type == wire.EVENTS and f.seq == add(r0, 16)
    missed = distance(f.seq, add(n, 1))
    assert missed == lost + 16
    recs = messages.decode_records(f.payload)[1]
    after = [(add(f.seq, i), ch, data) for i, (ch, data) in enumerate(recs)]
    first: dict[int, int] = {}
    for _, ch, data in after:
        first.setdefault(ch, messages.decode_sample(data)[0])
    gaps = sum((first[ch] - last[ch] - 1) & 0xFFFF for ch in last)
    assert gaps == missed


# -- push sessions (spec 003) through the frame queue (spec 002) ------------------------------


def test_subscribe_notify_ack_rules(open_dut: Open, transport: str) -> None:
    d = open_dut(transport)
    c = d.client
    t = 3 * d.slow
    subscribe(c, [2])
    f1, _, _ = report(c, 2, t)
    assert f1.seq == 1  # R0800
    c.send(messages.ack_frame(1, 200, channel=2))
    f2, body2, _ = report(c, 2, t)
    assert f2.seq == 2  # R0801: +1 on success
    # a fault keeps the number; 413 rebuilds with half the events
    c.send(messages.ack_frame(2, 413, channel=2))
    f3, body3, _ = report(c, 2, t)
    assert f3.seq == 2
    k2 = messages.decode_records(body2)[1]
    k3 = messages.decode_records(body3)[1]
    assert k3 == k2[: max(1, len(k2) // 2)]
    # no answer: after the timeout the identical bytes, same number (R0802)
    f4, _, raw4 = report(c, 2, t)
    assert f4.seq == 2 and raw4 == [codec.encode(x) for x in [f3]] if len(raw4) == 1 else True
    f5, _, raw5 = report(c, 2, t)
    assert f5.seq == 2 and raw5 == raw4
    c.send(messages.ack_frame(2, 200, channel=2))
    f6, _, _ = report(c, 2, t)
    assert f6.seq == 3
    # a new session numbers from 1 again
    subscribe(c, [2])
    c.drain(0.05)
    f7, _, _ = report(c, 2, t)
    assert f7.seq == 1


def test_partial_subscription(open_dut: Open, transport: str) -> None:
    d = open_dut(transport)
    c = d.client
    subscribe(c, [2, 8])
    seen: set[int] = set()
    end = d.now() + 2.5  # on the board's clock
    while d.now() < end:
        f = c.recv([wire.NOTIFY], 2.5 * d.slow)
        if f is None:
            break
        seen.add(f.channel)
        if f.last:
            c.send(messages.ack_frame(f.seq, 200, channel=f.channel))
    assert seen == {2, 8}  # channel 1 (200 Hz) is not subscribed: none of it
    subscribe(c, [])
    assert c.recv([wire.CLOSE]) is not None


def _until_fragment0(c: Client, channel: int, timeout: float = 5.0) -> Frame:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        f = c.recv([wire.NOTIFY], end - time.monotonic())
        assert f is not None
        if f.channel == channel and f.index == 0 and not f.last:
            return f
        if f.last:
            c.send(messages.ack_frame(f.seq, 200, channel=f.channel))
    raise AssertionError("no multi-fragment report")


BULK = {"report": {"ms": 600}}  # channel 1 fills the 1 KB body: several fragments per report
# The emulated Pico's sensors run at a quarter rate (Dut.pace): channel 1 makes ~950 B/s, so a
# 600 ms report is ~5 fragments of 128 B, and rp2's UART driver takes 1 KB at once (txbuf): the
# whole report can be in the driver before the host reads fragment 0, leaving nothing for the alarm
# to pass. A 3 s period fills ~2.9 KB (~24 fragments), most of them still in the agent's queue when
# fragment 0 reaches the host; the longer ACK timeout keeps a resend out of the report being read.
# (The CI failure that led here had another cause: a stale report read from the shared Pico's pty,
# fixed in conftest's Dut by SerialLink.flush / skip_to_hello.)
BULK_RP2 = {"report": {"ms": 3000, "bytes": 3072, "timeout": 2000}}


def test_alarm_preempts_large_report(open_dut: Open, transport: str) -> None:
    d = open_dut(transport, **(BULK_RP2 if transport.startswith("pico") else BULK))
    c = d.client
    subscribe(c, [1, 9])
    head = _until_fragment0(c, 1, 5 * d.slow)
    c.send_raw(b"\x21\x10garbage!!!!")  # a bad frame: the agent raises an alarm (priority 7)
    order: list[Frame] = []
    while True:
        f = c.recv([wire.NOTIFY], 3 * d.slow)
        assert f is not None
        order.append(f)
        if f.channel == 1 and f.message_id == head.message_id and f.last:
            break
    alarm = [i for i, f in enumerate(order) if f.channel == 9]
    assert alarm, "no alarm before the report finished"
    i = alarm[0]
    assert order[i].priority == 7 and order[i].last
    assert 0 < i < len(order) - 1 or i == 0  # between two fragments of the low-priority report
    rest = [f for f in order if f.channel == 1 and f.message_id == head.message_id]
    assert [f.index for f in rest] == list(range(1, len(rest) + 1))  # report intact, in order
    assert rest[-1].index >= 1 and any(f.index > order[i].index for f in rest[i:])
    code, value = messages.decode_alarm(messages.decode_records(order[i].payload)[1][0][1])
    assert (code, value) == (messages.ALARM_BAD_FRAME, 1)


def test_close_with_priority(open_dut: Open, transport: str) -> None:
    d = open_dut(transport, **(BULK_RP2 if transport.startswith("pico") else BULK))
    c = d.client
    subscribe(c, [1, 9])
    head = _until_fragment0(c, 1, 5 * d.slow)
    sent = time.monotonic()
    c.send_raw(b"\x21\x10garbage!!!!")  # alarm at priority 7 ...
    c.send(messages.subscribe_frame([]))  # ... then end the sessions: close with priority 3
    tail: list[Frame] = []
    # each frame with when the host had it (ms after the send): a failure tells a device that
    # answered late (frames spaced at the line rate) from a host that read fragment 0 late (the
    # frames after it already read, or waiting in the pty: ~0 ms)
    seen = ["%d frames read, not yet taken, at the send" % len(getattr(c.link, "ready", []))]
    while True:
        f = c.recv([wire.NOTIFY, wire.CLOSE, wire.ACK], 3 * d.slow)
        assert f is not None, seen
        tail.append(f)
        seen.append("%+.0f ms %s" % ((time.monotonic() - sent) * 1000, f))
        if f.type == wire.CLOSE:
            break
    close = tail[-1]
    assert (close.priority, close.channel, close.seq) == (3, 0, 0)
    notifies = [f for f in tail if f.type == wire.NOTIFY]
    # the alarm (priority 7 > 3) finishes before the close; the report (priority 0 < 3) is
    # abandoned: its last fragment never goes (spec 002: A1 B1 B2 CLOSE)
    alarms = [f for f in notifies if f.channel == 9]
    # one alarm report; on the emulated Pico (~0.3x real time) the CLOSE can come after the alarm's
    # ACK timeout (400 ms), so resends of it (the same MessageNumber: R0802) may come first
    assert len({f.seq for f in alarms}) == 1 and (d.kind == "rp2" or len(alarms) == 1)
    assert notifies[-1].channel == 9
    report_frags = [f for f in notifies if f.channel == 1 and f.message_id == head.message_id]
    assert not any(f.last for f in report_frags), seen
    assert c.recv([wire.NOTIFY], 0.5 * d.slow) is None  # nothing after the close


# -- robustness and heap ----------------------------------------------------------------------


def _health(c: Client, timeout: float = 4.0) -> dict[str, int]:
    """The next health record, by polling from the newest offset."""
    _, n1 = messages.decode_recovery(c.poll(add(first_range(c)[1], 1000)))
    n = n1
    end = time.monotonic() + timeout
    # one batch at a time, not catch_up(): on the emulated Pico a NO_EVENT may never come (a poll's
    # round trip can outlast the sample interval), and the first health record is all we need
    while time.monotonic() < end:
        f = c.poll(n, 255)
        if f.type == wire.RECOVERY:  # the oldest went while we asked: a little ahead
            n = add(messages.decode_recovery(f)[0], 3)
            continue
        if f.type == wire.NO_EVENT:
            time.sleep(0.1)
            continue
        assert f.type == wire.EVENTS and f.seq == add(n, 1), f
        _, recs = messages.decode_records(f.payload)
        for ch, data in recs:
            if ch == 8:
                return messages.decode_health(data)
        n = add(f.seq, len(recs) - 1)
    raise AssertionError("no health record")


def test_bad_frames_counted_and_agent_alive(open_dut: Open, transport: str) -> None:
    d = open_dut(transport, health={"ms": 300})
    c = d.client
    good = codec.encode(messages.hello_request())
    bad = [
        bytes(range(1, 40)),  # random bytes
        good[:-3],  # truncated
        good[:-1] + bytes([good[-1] ^ 1]),  # CRC
        bytes([0x41]) + good[1:],  # version 2
        codec.encode(Frame(wire.EVENTS, 5, b"\x00\x00\x00")),  # valid frame, wrong direction
        codec.encode(Frame(wire.POLL, 5, b"\x00")),  # POLL payload of the wrong size
        codec.encode(Frame(wire.POLL, 5, b"\x00\x01\x00\x40\x00")),  # a burst of 0 frames
        codec.encode(Frame(wire.POLL, 5, b"\x00\x01\x00\x40\x21")),  # a burst of 33 frames
    ]
    for b in bad:
        c.send_raw(b)
        if transport == "pico-udp":  # the official rp2 image's lwIP socket keeps 4 datagrams
            d.sleep(0.05)  # (MicroPython's LWIP_INCOMING_PACKET_QUEUE_LEN): more at once never arrive
    expected = len(bad)
    if isinstance(c.link, SerialLink):
        c.link.send_bytes(b"\x01" * 300 + b"\x00")  # longer than any frame: oversize
        expected += 1
    h = c.hello()  # still answering
    assert h.capacity == 256
    d.sleep(0.4)
    health = _health(c, 4 * d.slow)
    assert health["bad_frames"] == expected
    assert health["dropped"] == 0


def _load(d: Dut, n: int, seconds: float, health: list[dict[str, int]]) -> tuple[int, int]:
    """Poll in batches (and ACK any report) for `seconds` of the board's clock; returns (n, events
    received)."""
    c = d.client
    received = 0
    end = d.now() + seconds
    while d.now() < end:
        f = c.poll(n, 255)
        if f.type == wire.EVENTS:
            _, recs = messages.decode_records(f.payload)
            n = add(f.seq, len(recs) - 1)
            received += len(recs)
            health += [messages.decode_health(data) for ch, data in recs if ch == 8]
        elif f.type == wire.RECOVERY:
            n = add(messages.decode_recovery(f)[0], 3)
        for g in c.drain(0):
            if g.type == wire.NOTIFY and g.last:
                c.send(messages.ack_frame(g.seq, 200, channel=g.channel))
    return n, received


@pytest.mark.timeout(90)
def test_heap_within_budget_under_load(open_dut: Open, transport: str) -> None:
    """A minute of events at the default rates (12 ev/s) 50 times over: 600 ev/s for 2 x 6 s, polled
    in batches; first polling only, then with push sessions on two channels (1 KB report bodies).
    (The emulated Pico: 150 ev/s for 2 x 3 s of its clock; its heap is 246 KB, the floors below
    are the 64 KB board's.)"""
    sensors = [{"ch": 1, "hz": 400, "size": 16}, {"ch": 2, "hz": 200, "size": 12}]
    d = open_dut(transport, sensors=sensors, health={"ms": 500})
    c = d.client
    n0, _ = first_range(c)
    polled: list[dict[str, int]] = []
    secs = 6.0 if d.pace == 1 else 3.0
    n, got1 = _load(d, add(n0, -1), secs, polled)
    subscribe(c, [1, 2])
    pushed: list[dict[str, int]] = []
    n, got2 = _load(d, n, secs, pushed)
    rate = sum(s["hz"] for s in d.config["sensors"])
    assert got1 + got2 > 0.8 * rate * 2 * secs  # (6000 of 7200 on the unix port)
    assert len(polled) >= 2 * secs - 4 and len(pushed) >= 2 * secs - 4
    heap = 64 * 1024
    for h in polled + pushed:
        assert h["dropped"] == 0 and h["bad_frames"] == 0
    # heap_free is measured after a collection (what is live); heap_min is the lowest free seen
    # between collections (garbage included: UDP receives allocate). The floor leaves the agent
    # with the native receive scan and the core responder ~24.9 KB free here (measured 25,216 B
    # at the least over the serial link on the unix port)
    assert min(h["heap_free"] for h in polled[1:]) >= 0.38 * heap, polled
    # two push sessions: the frames + reports modules (~4.7 KB), and per session a 1 KB body and
    # up to two copies of a report in flight
    assert min(h["heap_free"] for h in pushed[2:]) >= 0.20 * heap, pushed
    assert min(h["heap_min"] for h in polled) >= 0.30 * heap, polled
    assert min(h["heap_min"] for h in pushed) >= 0.10 * heap, pushed
