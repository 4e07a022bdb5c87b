from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leadwire import u32

TOP = 0xFFFFFFFF


def test_successor_wraps_at_2_32() -> None:
    assert u32.succ(TOP) == 0
    assert u32.succ(0) == 1
    assert u32.succ(TOP - 1) == TOP
    assert u32.pred(0) == TOP


@pytest.mark.parametrize(
    ("a", "b", "d"),
    [
        (0, TOP, 1),
        (TOP, 0, -1),
        (5, TOP - 4, 10),
        (TOP - 4, 5, -10),
        (0x80000000, 0, -0x80000000),  # the one ambiguous distance maps to the negative end
        (0x7FFFFFFF, 0, 0x7FFFFFFF),
        (7, 7, 0),
    ],
)
def test_diff_around_the_wrap(a: int, b: int, d: int) -> None:
    assert u32.diff(a, b) == d


def test_ordering_across_the_wrap() -> None:
    assert u32.lt(TOP, 0)
    assert not u32.lt(0, TOP)
    assert u32.le(3, 3)
    assert u32.distance(2, TOP) == 3


@given(st.integers(0, TOP), st.integers(-(2**31), 2**31 - 1))
def test_diff_inverts_add(a: int, k: int) -> None:
    assert u32.diff(u32.add(a, k), a) == k


@given(st.integers(0, TOP))
def test_halves_roundtrip(n: int) -> None:
    hi, lo = u32.halves(n)
    assert 0 <= hi < 65536 and 0 <= lo < 65536
    assert u32.join(hi, lo) == n
