"""Report sequence (spec 003), provider side."""

from __future__ import annotations

import pytest

from leadwire.reports import ReportSequence


def test_r0800_first_report_of_a_session_is_1() -> None:
    s = ReportSequence()
    s.begin()
    assert s.number == 1
    s.hold(b"a")
    assert s.confirm(200)
    s.begin()  # a new Subscribe: a new session
    assert s.number == 1 and s.sessions == 2


@pytest.mark.parametrize("status", [200, 204, 299])
def test_r0801_success_adds_exactly_one(status: int) -> None:
    s = ReportSequence()
    s.begin()
    s.hold(b"r")
    assert s.confirm(status) is True
    assert s.number == 2 and s.pending is None


@pytest.mark.parametrize("status", [199, 300, 413, 503])
def test_r0801_fault_keeps_the_number_and_allows_a_rebuild(status: int) -> None:
    s = ReportSequence()
    s.begin()
    s.hold(b"big report")
    assert s.confirm(status) is False
    assert s.number == 1 and s.faults == 1
    assert s.hold(b"smaller") == b"smaller"  # R0802: changed content only after a fault


def test_r0802_timeout_resends_identical_bytes() -> None:
    s = ReportSequence()
    s.begin()
    sent = s.hold(b"\x01\x02report")
    assert s.timeout() is sent
    assert s.timeout() == b"\x01\x02report"
    assert s.retransmissions == 2 and s.number == 1
    with pytest.raises(ValueError):
        s.hold(b"different")  # not allowed while awaiting confirmation


def test_misuse() -> None:
    s = ReportSequence()
    with pytest.raises(ValueError):
        s.hold(b"x")
    assert s.confirm(200) is False and s.number == 0
    s.begin()
    with pytest.raises(ValueError):
        s.timeout()
