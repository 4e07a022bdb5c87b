"""Config-declared sources and lwirq.Emitter on the unix port (fast; the emulated Pico runs the
documented examples with its ADC: test_app_pico.py): a "call" source's readings, one per period, in
order; bad entries said on the console and left out; an Emitter's buffers written in the order
posted, the posts that found every buffer waiting counted, not queued."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from leadwire import frames, messages, wire
from leadwire.reassembly import Reassembler
from leadwire.tools.board import start_board
from leadwire.tools.firmware_build import build
from leadwire.tools.wireclient import Client, SerialLink

pytestmark = [pytest.mark.micropython, pytest.mark.timeout(60)]

CALLED = """
n = 0


def level(buf):
    global n
    n += 1
    buf[0] = n >> 8
    buf[1] = n & 0xFF
    return 2 if n % 3 else 0  # every third call: nothing to say
"""

EMITTER_APP = """
import asyncio

import lwapp
import lwirq


async def app(agent):
    e = lwirq.Emitter(agent, 4, 2, 2)  # two buffers
    for v in range(5):  # no await in between: the task that writes them cannot run
        b = e.buffer()
        if b is not None:
            b[0] = 0
            b[1] = v
            e.post()
    await asyncio.sleep_ms(50)
    for v in range(5, 8):
        b = e.buffer()
        b[0] = 0
        b[1] = v
        e.post()
        await asyncio.sleep_ms(10)
    agent.emit(4, bytes([0xEE, e.missed]), 2)


lwapp.run(app)
"""


PUSH_APP = """
import asyncio

import lwapp


async def app(agent):
    agent.channel(3)
    buf = bytearray(2)
    v = 0
    while True:
        v += 1
        buf[0] = v >> 8
        buf[1] = v & 0xFF
        agent.emit(3, buf, 2)
        if v == 40:
            agent.alarm(128, v)
        await asyncio.sleep_ms(20)


lwapp.run(app)
"""


def ring_events(c: Client, channel: int) -> list[bytes]:
    f = c.poll(0, 1)
    assert f.type == wire.RECOVERY, f
    n = (messages.decode_recovery(f)[0] - 1) & 0xFFFFFFFF
    out: list[tuple[int, bytes]] = []
    while True:
        f = c.poll(n, 255)
        if f.type != wire.EVENTS:
            return [d for ch, d in out if ch == channel]
        _, recs = messages.decode_records(f.payload)
        out += recs
        n = (f.seq + len(recs) - 1) & 0xFFFFFFFF


def test_call_source_and_bad_entries(tmp_path: Path) -> None:
    d = tmp_path / "board"
    build("unix", d)
    (d / "app.py").write_text(CALLED)
    cfg = {
        "health": {"ms": 0},
        "sensors": [
            {"ch": 5, "hz": 20, "call": "app.level", "size": 4},
            {"ch": 6, "hz": 5, "i2c": {"addr": 72, "n": 9}, "size": 4},
            {"ch": 7, "hz": 5, "call": "nosuchmodule.f"},
        ],
    }
    with start_board("serial", config=cfg, board_dir=d, build_firmware=False) as b:
        time.sleep(0.6)
        c = Client(SerialLink(b.port or ""))
        try:
            got = [int.from_bytes(x, "big") for x in ring_events(c, 5)]
        finally:
            c.close()
        out = b.console()
    assert "config: sensor on channel 6: ValueError('i2c: n must be 1..size',); skipped" in out, out
    assert "config: sensor on channel 7: ImportError(" in out, out
    # calls 1, 2, 4, 5, 7, ... (every third said nothing), one per 50 ms from the start
    assert got == [v for v in range(1, 3 * len(got)) if v % 3][: len(got)]
    assert len(got) >= 4, got  # (~8 in 0.6 s; fewer on a loaded host)


def test_emitter_keeps_order_and_counts_what_it_could_not_hold(tmp_path: Path) -> None:
    d = tmp_path / "board"
    build("unix", d)
    (d / "main.py").write_text(EMITTER_APP)
    cfg = {"health": {"ms": 0}, "sensors": []}
    with start_board("serial", config=cfg, board_dir=d, build_firmware=False) as b:
        time.sleep(0.4)
        c = Client(SerialLink(b.port or ""))
        try:
            got = ring_events(c, 4)
        finally:
            c.close()
    # 0 and 1 held, 2..4 missed (both buffers waiting), 5..7 written as posted, then missed = 3
    assert got == [bytes([0, v]) for v in (0, 1, 5, 6, 7)] + [bytes([0xEE, 3])]


def test_application_channel_and_alarm_are_pushed(tmp_path: Path) -> None:
    """A SUBSCRIBE naming the application's channel (Agent.channel) and the alarm channel: the
    reports carry its readings, consecutive, and its alarm (code 128) comes as a NOTIFY of its own
    on the alarm channel. A report of many readings spans several NOTIFY frames (spec 002): they are
    reassembled into messages, as the bridge does, before the records are read."""
    d = tmp_path / "board"
    build("unix", d)
    (d / "main.py").write_text(PUSH_APP)
    cfg = {"health": {"ms": 0}, "sensors": [], "report": {"ms": 100}}
    with start_board("serial", config=cfg, board_dir=d, build_firmware=False) as b:
        c = Client(SerialLink(b.port or ""))
        try:
            ack = c.request(messages.subscribe_frame([3, 9]), [wire.ACK])
            assert messages.decode_ack(ack)[1] == 200
            readings: list[int] = []
            alarms: list[tuple[int, int]] = []
            reasm = Reassembler(max_messages=16, max_bytes=65536)
            channel_of: dict[int, int] = {}  # message id -> the channel its frames came on
            end = time.monotonic() + 10
            while time.monotonic() < end and not (alarms and len(readings) >= 30):
                f = c.recv([wire.NOTIFY], 1.0)
                if f is None:
                    continue
                c.send(messages.ack_frame(f.seq, 200, f.channel))
                channel_of.setdefault(f.message_id, f.channel)
                m = reasm.feed(frames.Frame(f.message_id, f.index, f.last, f.priority, f.payload))
                if m is None or m.is_close:
                    continue
                _, recs = messages.decode_records(m.data)
                if channel_of.pop(m.message_id) == 3:
                    readings += [int.from_bytes(x, "big") for ch, x in recs if ch == 3]
                else:
                    alarms += [messages.decode_alarm(x) for ch, x in recs if ch == 9]
        finally:
            c.close()
    assert reasm.dropped == 0
    assert alarms == [(128, 40)]
    assert len(readings) >= 30 and readings == list(range(readings[0], readings[0] + len(readings)))
