"""Lead (spec 000): every worked example as written, and a reference-model property."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leadwire.lead import DUPLICATE, GAP, IN_ORDER, LATE, LeadTracker, classify, ordered
from leadwire.u32 import diff

VECTORS = json.loads((Path(__file__).parents[1] / "vectors" / "lead.json").read_text())


@pytest.mark.parametrize(
    ("arrivals", "leads"),
    [
        ([10, 11, 12, 13, 14], [1, 1, 1, 1, 1]),  # nominal
        ([10, 11, 13, 12, 14], [1, 1, 2, -1, 1]),  # 12 delayed after 13; 14 has lead 1, not 2
        ([10, 11, 11, 12, 13, 14], [1, 1, 0, 1, 1, 1]),  # 11 twice in a row
        ([10, 11, 12, 13, 11, 14], [1, 1, 1, 1, -2, 1]),  # delayed duplicate: negative, not 0
        ([10, 11, 13, 14], [1, 1, 2, 1]),  # 12 lost
    ],
    ids=["nominal", "out_of_order", "duplicate", "delayed_duplicate", "lost"],
)
def test_spec_000_examples(arrivals: list[int], leads: list[int]) -> None:
    t = LeadTracker()
    assert [t.lead("sender", 1, s) for s in arrivals] == leads


def test_vectors_agree() -> None:
    for v in VECTORS:
        t = LeadTracker()
        assert [t.lead("s", 0, s) for s in v["arrivals"]] == v["leads"], v["name"]


def test_per_sender_and_per_channel() -> None:
    t = LeadTracker()
    assert t.lead("a", 1, 10) == 1
    assert t.lead("a", 2, 50) == 1  # another channel: its own first message
    assert t.lead("b", 1, 3) == 1  # another sender
    assert t.lead("a", 1, 12) == 2
    assert t.lead("a", 2, 49) == -1
    t.reset("a")
    assert t.lead("a", 1, 1000) == 1 and t.lead("b", 1, 4) == 1


def test_classify_and_ordered() -> None:
    assert [classify(x) for x in (1, 0, 3, -2)] == [IN_ORDER, DUPLICATE, GAP, LATE]
    assert [ordered(x) for x in (1, 0, 3, -2)] == [True, False, True, False]


@given(st.integers(0, 2**32 - 1), st.lists(st.integers(-50, 50), min_size=1, max_size=60))
def test_lead_equals_plain_reference_model(base: int, rel: list[int]) -> None:
    """Unwrapped integers with max() are the model; the tracker sees them mod 2^32."""
    t = LeadTracker()
    last = None
    for r in rel:
        expected = 1 if last is None else r - last
        last = r if last is None else max(last, r)
        assert t.lead("s", 0, (base + r) % 2**32) == expected
    assert diff(t.last("s", 0), base) == max(rel)
