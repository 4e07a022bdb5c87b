"""Random and mutated frames to a virtual board (bench/fuzz_bench.py sends >= 100k)."""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from leadwire import codec, framing, messages, wire
from leadwire.tools.authclient import POLL_ANSWERS, AuthClient
from leadwire.tools.board import start_board
from leadwire.tools.fuzz_board import (
    MAX_DATAGRAM,
    SERIAL_CAP,
    SERIAL_MAX_FRAME,
    BoardFuzzer,
    SerialBoardFuzzer,
    auth_verdict,
    board_config,
    reseal_signed,
    serial_items,
    serial_verdicts,
    verdict,
)
from leadwire.tools.fuzz_mutate import Mutator, corpus, stream
from leadwire.tools.wireclient import SerialLink, UdpLink

pytestmark = pytest.mark.micropython


def test_the_model_of_the_agent_receive_path() -> None:
    from leadwire import messages

    assert verdict(codec.encode(messages.poll_frame(1, 2, 3))) == "poll"
    assert verdict(codec.encode(messages.hello_request())) == "hello"
    assert verdict(codec.encode(messages.ack_frame(1))) == "ack"
    assert verdict(codec.encode(messages.subscribe_frame([1, 2]))) == "subscribe"
    assert verdict(codec.encode(messages.recovery_frame(1, 2))) == "bad"  # a device->host type
    assert verdict(b"") == verdict(b"\x00") == "bad"
    big = codec.encode(codec.Frame(2, 0, bytes(200)))  # a valid frame, but longer than the buffer
    assert verdict(big) == "bad" and verdict(big, udp=False) == "bad"
    signed = bytearray(codec.encode(messages.poll_frame(1, 2, 3))) + bytearray(8)
    assert verdict(bytes(reseal_signed(signed))) == "bad"  # signed, auth off
    assert auth_verdict(bytes(signed), set()) == "forged"
    assert auth_verdict(bytes(signed), {bytes(signed)}) == "replayed"
    assert auth_verdict(codec.encode(messages.poll_frame(1, 2, 3)), set()) == "unsigned"
    assert auth_verdict(b"\x00", set()) == "bad"


def _fuzz_board(transport: str, fuzzer: Callable[[Any], Any], units: int) -> tuple[Any, Any, str]:
    """Start a board on `transport`, send it `units` fuzz units, let it settle; the fuzzer, its
    result and the board's console (the board must still be alive at the end)."""
    with start_board(transport, config=board_config(health_ms=100, alarm_gap_ms=50)) as b:
        assert (b.address if transport == "udp" else b.port) is not None
        f = fuzzer(b)
        try:
            r = f.run(units)
            f.settle(0.05, 0.1)
        finally:
            f.close()
        assert b.alive()
        return f, r, b.console()


@pytest.mark.timeout(90)
def test_the_board_answers_every_poll_and_counts_every_bad_frame() -> None:
    f, r, console = _fuzz_board("udp", lambda b: BoardFuzzer(b.address, seed=3), 2000)
    s = r.summary()
    assert r.wrong == [] and r.unanswered == 0, (r.wrong[:5], s)
    assert s["polls"] == sum(r.answers.values()) >= 2000 // 16
    assert r.answers["events"] > 0  # the poll client received the board's events meanwhile
    assert f.pc.lost == 0 and f.pc.restarts == 0
    # exact: the agent counted every bad frame sent, no more, no less
    assert r.final_alarm == r.total == 2001
    assert r.final_health == r.total
    assert r.health_bad and r.alarm_bad
    assert "agent:" not in console  # no exception caught in the agent's loop
    assert {"mutated", "random", "valid_other", "oversize", "tiny"} <= set(r.sent)


def test_the_model_of_the_agent_serial_decoder() -> None:
    """serial_items (written from the protocol's rules) gives what the board's decoder gives:
    framing.StreamDecoder(128) with the board's own COBS unstuffing, on damaged streams."""
    poll = codec.encode(messages.poll_frame(1, 2, 3))
    assert serial_items(framing.encode(poll)) == [poll]
    assert serial_verdicts(b"\x00\x00" + framing.encode(poll)) == ["poll"]  # empty frames: ignored
    assert serial_items(bytes([1]) * SERIAL_CAP + b"\x00") == [wire.E_VERSION]  # 128 zeros: not oversize
    assert serial_items(bytes([1]) * (SERIAL_CAP + 1) + b"\x00") == [wire.E_OVERSIZE]
    assert serial_items(b"\x05\x01\x00") == [wire.E_COBS]
    assert serial_items(framing.encode(poll)[:-1]) == []  # no delimiter yet: nothing
    m = Mutator(corpus(2), random.Random(2))
    saved = framing._unstuff
    framing._unstuff = framing._unstuff_own  # the board's decoder, run on CPython
    try:
        for _ in range(300):
            data = stream(m, 10)[0]
            data = data[: data.rfind(b"\x00") + 1]
            got = framing.StreamDecoder(128).feed(data)
            want = serial_items(data)
            assert [x.code if isinstance(x, wire.WireError) else codec.encode(x) for x in got] == want
    finally:
        framing._unstuff = saved


@pytest.mark.timeout(90)
def test_the_board_answers_every_poll_and_counts_every_bad_frame_on_serial() -> None:
    """Over serial (COBS on the board's pty): mutated, random, damaged-COBS, oversize (at the exact
    limit and past it) and empty frames; every POLL answered, every bad frame counted exactly."""
    f, r, console = _fuzz_board("serial", lambda b: SerialBoardFuzzer(b.port, seed=4), 8000)
    s = r.summary()
    assert r.wrong == [] and r.unanswered == 0, (r.wrong[:5], s)
    assert s["polls"] == sum(r.answers.values()) >= 8000 // 16
    assert r.answers["events"] > 0
    assert f.pc.lost == 0 and f.pc.restarts == 0
    assert f.units == 8000 and r.total > 8000  # units may hold several frames
    assert r.final_alarm == r.total  # exact
    assert r.final_health == min(r.total, 0xFFFF)
    assert "agent:" not in console
    assert {"mutated", "random", "valid_other", "cobs_damage", "noise", "oversize", "tiny"} <= set(r.sent)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("transport", ["udp", "serial"])
def test_with_auth_on_every_random_frame_is_refused_and_counted(transport: str) -> None:
    """Auth on: random, mutated, well-formed unsigned, mutated signed and replayed signed frames;
    signed POLLs interleaved are all answered, and every input is counted exactly once: as a bad
    frame (health) or as forged / replayed / unsigned (the auth record). Over serial each input is
    one COBS frame (StreamDecoder(136) with auth on: longer ones are oversize, a bad frame)."""
    n_inputs = 1500
    with start_board(transport, key="auto", config=board_config(health_ms=100, alarm_gap_ms=50)) as b:
        assert b.key is not None
        if transport == "udp":
            assert b.address is not None
            c = AuthClient(UdpLink(b.address), b.key)
        else:
            assert b.port is not None
            c = AuthClient(SerialLink(b.port), b.key)
            c.recv_bytes(1.0)  # the boot HELLO
        gen = BoardFuzzer(None, seed=5)  # its inputs only (bad_input)
        rng = random.Random(5)
        accepted: list[bytes] = []  # the signed POLLs the board took
        want: Counter[str] = Counter()
        polls = answered = 0
        try:
            c.handshake()
            at: list[int | None] = [None]

            def poll() -> bool:
                # a signed POLL, awaited: the inputs before it were all read
                f = messages.poll_frame(at[0] or 0, 64, 1000, tag=c.next_tag())
                p = c.sign(f)
                c.send(p)
                got = c.recv(2.0, POLL_ANSWERS)
                while got is not None and got.message_id != f.message_id:
                    got = c.recv(2.0, POLL_ANSWERS)
                if got is None:
                    return False
                accepted.append(p)
                if got.type == wire.RECOVERY:
                    at[0] = (messages.decode_recovery(got)[0] - 1) & 0xFFFFFFFF
                elif got.type == wire.EVENTS:
                    at[0] = (got.seq + len(messages.decode_records(got.payload)[1]) - 1) & 0xFFFFFFFF
                return True

            for i in range(n_inputs):
                if i % 16 == 0:
                    polls += 1
                    answered += poll()
                while True:
                    r = rng.random()
                    if r < 0.1 and accepted:
                        data = rng.choice(accepted)  # replayed, as it was
                    elif r < 0.25 and accepted:
                        m = bytearray(rng.choice(accepted))  # a signed frame changed, CRC made right
                        for _ in range(1 + (rng.random() < 0.3)):
                            m = rng.choice(gen.m.ops)(m)
                        data = bytes(reseal_signed(m) if rng.random() < 0.7 else m)
                    else:
                        data = gen.bad_input()[1]
                    if transport == "udp":
                        data = data[:MAX_DATAGRAM]
                        v = auth_verdict(data, set(accepted))
                    else:  # one run: a frame, or an error code (E_OVERSIZE above 136 bytes)
                        (x,) = serial_items(framing.encode(data), SERIAL_MAX_FRAME + 8)
                        v = auth_verdict(x, set(accepted)) if isinstance(x, bytes) else "bad"
                    if v != "hello":
                        break
                c.send(data)
                want[v] += 1
            polls += 1
            answered += poll()
            assert c.rejected == []  # every frame the board sent verified
            assert answered == polls, (answered, polls)
            # every input counted: a health record and its auth record made after the last one
            exp = {
                "auth_forged": want["forged"],
                "auth_replayed": want["replayed"],
                "auth_unsigned": want["unsigned"],
            }
            end = time.monotonic() + 15
            seen = None
            while time.monotonic() < end:
                time.sleep(0.3)
                recs = [d for _, d in c.records(8)]
                auth_recs = [messages.decode_health_auth(d) for d in recs if len(d) == 6]
                health = [messages.decode_health(d) for d in recs if len(d) == 16]
                if auth_recs and health:
                    seen = (health[-1]["bad_frames"], auth_recs[-1])
                    if seen == (want["bad"], exp):
                        break
            assert seen == (want["bad"], exp), (seen, want)
            assert sum(want.values()) == n_inputs and min(want.values()) > 20, want
        finally:
            gen.close()
            c.close()
        assert b.alive() and "agent:" not in b.console()
