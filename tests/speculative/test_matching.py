"""Where the newest tokens occurred before (homespec.speculative.matching): every reported match
agrees for its whole length, none is missed, and the order is longest, then latest."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from homespec.speculative.matching import matches


def _agree(seq: list[int], end: int, n: int) -> int:
    """Tokens before `end` that agree with the newest ones (brute force)."""
    k = 0
    while k < end and k < len(seq) - 1 and seq[end - 1 - k] == seq[-1 - k]:
        k += 1
    return k


def test_the_docstring_example():
    seq = np.array([5, 6, 7, 8, 9, 1, 5, 6, 7, 2, 3, 5, 6, 7])
    found = matches(seq)
    assert [(m.end, m.length) for m in found] == [(9, 3), (3, 3)]
    assert seq[found[0].end] == 2


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=2, max_size=60), st.integers(1, 4))
def test_matches_agree_and_come_longest_then_latest(seq, max_ngram):
    found = matches(np.array(seq), max_ngram=max_ngram, cap=64, recent=1000)
    for m in found:
        assert 1 <= m.end <= len(seq) - 1  # a continuation token exists
        assert m.length == min(_agree(seq, m.end, m.length), 64)
    keys = [(-m.length, -m.end) for m in found]
    assert keys == sorted(keys)
    # none missed: every earlier occurrence of the newest n-gram the search settled on is reported
    if found:
        n = min(m.length for m in found)
        n = min(n, max_ngram)
        expect = {e for e in range(n, len(seq)) if seq[e - n:e] == seq[-n:] and e < len(seq)}
        assert {m.end for m in found} == expect


def test_nothing_earlier_is_no_match():
    assert matches(np.array([1, 2, 3])) == []
    assert matches(np.array([7])) == []


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=2, max_size=60), st.integers(1, 6))
def test_a_floor_keeps_exactly_the_matches_at_least_that_long(seq, floor):
    """The guard's floor (BatchGuard.match_floor) cuts the search short, never its result: the
    matches found with a floor are the ones found without it that are at least that long, in the
    same order."""
    seq = np.array(seq)
    whole = matches(seq, cap=64, recent=1000)
    assert matches(seq, floor=floor, cap=64, recent=1000) == [m for m in whole if m.length >= floor]
