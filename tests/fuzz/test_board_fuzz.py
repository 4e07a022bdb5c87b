"""Random and mutated frames to a virtual board (bench/fuzz_bench.py sends >= 100k)."""

from __future__ import annotations

import pytest

from leadwire.tools.board import start_board

from .boardfuzz import BoardFuzzer, board_config, verdict

pytestmark = pytest.mark.micropython


def test_the_model_of_the_agent_receive_path() -> None:
    from leadwire import codec, messages

    assert verdict(codec.encode(messages.poll_frame(1, 2, 3))) == "poll"
    assert verdict(codec.encode(messages.hello_request())) == "hello"
    assert verdict(codec.encode(messages.ack_frame(1))) == "ack"
    assert verdict(codec.encode(messages.subscribe_frame([1, 2]))) == "subscribe"
    assert verdict(codec.encode(messages.recovery_frame(1, 2))) == "bad"  # a device->host type
    assert verdict(b"") == verdict(b"\x00") == "bad"
    big = codec.encode(codec.Frame(2, 0, bytes(200)))  # a valid frame, but longer than the buffer
    assert verdict(big) == "bad" and verdict(big, udp=False) == "bad"


@pytest.mark.timeout(90)
def test_the_board_answers_every_poll_and_counts_every_bad_frame() -> None:
    with start_board("udp", config=board_config(health_ms=100, alarm_gap_ms=50)) as b:
        assert b.address is not None
        f = BoardFuzzer(b.address, seed=3)
        try:
            r = f.run(2000)
            f.settle(0.05, 0.1)
        finally:
            f.close()
        assert b.alive()
        console = b.console()
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
