"""Suffix drafting (speculative/drafters/suffix.py): the store every lane shares stays within its
bound and forgets what it drops; a lane drafts what another lane wrote; the chain follows what
most earlier occurrences continued with."""

from __future__ import annotations

import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from homespec.speculative.drafters.suffix import KEY, SuffixDrafter, SuffixStore, majority


def _indexed_docs(store: SuffixStore) -> set[int]:
    return {w >> 32 for where in store._index.values() for w in where}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 50), min_size=0, max_size=40), min_size=1, max_size=12), st.integers(5, 120))
def test_the_store_stays_within_its_bound_and_drops_oldest_first(answers, bound):
    store = SuffixStore(max_tokens=bound, per_key=4)
    ids = []
    for tokens in answers:
        doc = store.open(tokens[:3])
        store.extend(doc, tokens[3:])
        ids.append(doc)
        assert store.tokens <= bound
        kept = list(store._docs)
        assert not kept or kept == ids[-len(kept):]  # first in, first out
        assert _indexed_docs(store) <= set(kept)  # nothing dropped is still indexed
        assert all(0 < len(w) <= 4 for w in store._index.values())


def test_an_answer_is_found_by_its_last_three_tokens_latest_first():
    store = SuffixStore()
    first = store.open([])
    store.extend(first, [1, 2, 3, 4, 5, 6])
    second = store.open([])
    store.extend(second, [9, 2, 3, 4, 7, 8])
    found = store.find(np.array([0, 2, 3, 4]))
    assert found == [(KEY, [7, 8]), (KEY, [5, 6])]
    assert store.find(np.array([1, 2, 3, 4])) == [(KEY, [7, 8]), (4, [5, 6])]  # each measured back
    assert store.find(np.array([2, 3, 4]), skip=second) == [(KEY, [5, 6])]
    assert store.find(np.array([1, 2, 3, 4]), floor=4) == [(4, [5, 6])]  # shorter matches left out


def test_a_lane_drafts_what_another_lane_wrote():
    store = SuffixStore()
    writer, reader = SuffixDrafter(store, num_draft=4), SuffixDrafter(store, num_draft=4)
    writer.begin([10, 11], None)
    writer.accept([20, 21, 22, 23, 24, 25, 26], None, 27)  # committed in one step
    reader.begin([30, 31], None)
    (offer,) = reader.offers(22, [30, 31, 20, 21])
    assert offer.source == "suffix" and offer.tokens == (23, 24, 25, 26) and offer.key == 3
    assert reader.offers(99, [30, 31]) == ()
    assert reader.propose(22, [30, 31, 20, 21]).tokens.tolist() == [22, 23, 24, 25, 26]


def test_its_own_context_is_searched_too_and_the_longest_match_wins():
    store = SuffixStore()
    other = SuffixDrafter(store)
    other.begin([], None)
    other.accept([5, 6, 7, 1, 1], None, 0)
    d = SuffixDrafter(store, num_draft=3)
    d.begin([], None)
    context = [4, 5, 6, 7, 2, 2, 9, 4, 5, 6]  # own: 4 5 6 7 matched 4 long; the store's 5 6 7 only 3
    (offer,) = d.offers(7, context)
    assert offer.tokens == (2, 2, 9) and offer.key == 4


def test_the_chain_follows_the_majority():
    assert majority([[1, 2, 3], [1, 2, 4], [1, 5], [1, 2, 4]]) == [1, 2, 4]
    assert majority([[7, 8], [6, 9]]) == [7, 8]  # a tie: the first listed (the latest occurrence)
    assert majority([[], []]) == []


def test_the_bound_is_kept_under_load():
    store = SuffixStore(max_tokens=5_000)
    rng = random.Random(0)
    for _ in range(40):
        doc = store.open([1, 2, 3])
        for _ in range(10):
            store.extend(doc, [rng.randrange(1000) for _ in range(30)])
    assert 4_700 <= store.tokens <= 5_000
    assert _indexed_docs(store) == set(store._docs)
