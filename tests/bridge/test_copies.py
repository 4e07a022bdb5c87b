"""host/bridge/copies.py: when a POLL goes twice (its case table), exactly."""

from __future__ import annotations

from leadwire.bridge.copies import COPIES_ANSWERED, LOSS_SPAN, PollCopies


def lossy_link(c: PollCopies, frames: int, gaps: int) -> None:
    for i in range(frames):
        c.on_frame(1000 + i, 1)  # (tags no POLL of these tests uses)
    for n in range(gaps):
        c.on_gap(n)


def test_copies_only_on_a_lossy_link_losing_at_least_the_floor() -> None:
    c = PollCopies(True)
    lossy_link(c, 400, 9)  # 2.25%
    assert not c.on_send(1, True)
    c.on_gap(9)
    c.on_gap(9)  # the frames held behind one gap count it once: 10 of 400 = 2.5%
    assert c.on_send(2, True) and c.sent == 1
    assert not c.on_send(3, False)  # the link lost nothing lately (the probe's condition)
    assert not PollCopies(False).on_send(4, True)


def test_few_frames_are_judged_as_200() -> None:
    c = PollCopies(True)
    lossy_link(c, 10, 4)  # 4 of 10 frames, but 4 of the floor's 200 = 2%
    assert not c.on_send(1, True)
    c.on_gap(4)
    assert c.on_send(2, True)  # 5 of 200


def test_the_estimate_halves_every_loss_span_frames() -> None:
    c = PollCopies(True)
    lossy_link(c, LOSS_SPAN - 1, 200)
    c.on_frame(7, 1)
    assert (c._frames, c._gaps) == (LOSS_SPAN // 2, 100)


def test_a_device_answering_both_copies_gets_none_after_enough_of_them() -> None:
    c = PollCopies(True)
    lossy_link(c, 400, 40)
    for k in range(COPIES_ANSWERED):
        tag = k % 256
        assert c.on_send(tag, True)
        c.on_frame(tag, 0)
        c.on_frame(tag, 1)  # (later frames of a burst are not its start)
        assert c.off_reason is None
        c.on_frame(tag, 0)  # the copy's answer
    assert c.answered_twice == COPIES_ANSWERED
    assert c.off_reason == {"copies": COPIES_ANSWERED, "answered_twice": COPIES_ANSWERED}
    assert not c.on_send(200, True)


def test_one_answer_per_copy_and_a_tag_coming_round_again_starts_afresh() -> None:
    c = PollCopies(True)
    lossy_link(c, 400, 40)
    assert c.on_send(5, True)
    c.on_frame(5, 0)
    assert c.answered_twice == 0
    assert not c.on_send(5, False)  # tag 5 again, 256 sends later, not copied: its record goes
    c.on_frame(5, 0)
    assert c.answered_twice == 0
