"""Prompt-lookup drafting."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from homespec.contracts.tree import check_parents, paths
from homespec.speculative.drafters.ngram import NgramDrafter, find_continuations


def test_finds_the_latest_repeat():
    d = NgramDrafter(max_ngram=3, num_draft=4)
    #          0  1  2  3  4  5  6  7  8  9 10 11
    context = [5, 6, 7, 8, 9, 1, 5, 6, 7, 2, 3, 5, 6]
    tree = d.propose(7, context)  # suffix (5, 6, 7) last seen at 6..8, followed by 2, 3, 5, 6
    assert tree.tokens.tolist() == [7, 2, 3, 5, 6]
    assert tree.parents.tolist() == [-1, 0, 1, 2, 3]
    assert tree.probs.tolist() == [1.0] * 5


def test_longer_ngram_wins_over_recency():
    # (1, 2) is followed by 3 early on; the later occurrence of just (2) is followed by 9
    context = [1, 2, 3, 4, 2, 9, 8, 1]
    assert NgramDrafter(max_ngram=2, num_draft=2).propose(2, context).tokens.tolist() == [2, 3, 4]
    # a lookup of the newest token alone still measures each match backwards: (1, 2) agrees longer
    assert NgramDrafter(max_ngram=1, num_draft=2).propose(2, context).tokens.tolist() == [2, 3, 4]
    # ... and among matches of equal length the latest wins
    assert NgramDrafter(max_ngram=1, num_draft=2).propose(2, [5, 2, 9, 6, 2, 8, 7]).tokens.tolist() == [2, 8, 7]


def test_an_offer_is_the_chain_and_its_match_length():
    d = NgramDrafter(max_ngram=3, num_draft=3)
    #          0  1  2  3  4  5  6  7  8  9
    context = [4, 5, 6, 7, 1, 2, 4, 5, 6, 7]
    (offer,) = d.offers(1, context)  # newest 3-gram (6, 7, 1) first at 2..4; matched back 5 long
    assert (offer.source, offer.tokens, offer.key) == ("ngram", (2, 4, 5), 5)
    assert d.offers(9, [1, 2, 3]) == ()  # nothing earlier: nothing offered


def test_no_repeat_gives_a_bare_root():
    tree = NgramDrafter().propose(4, [1, 2, 3])
    assert tree.size == 1 and tree.tokens.tolist() == [4]
    assert NgramDrafter().propose(4, []).size == 1


def test_continuation_stops_at_the_context_end():
    tree = NgramDrafter(max_ngram=2, num_draft=8).propose(2, [1, 2, 3, 1])
    assert tree.tokens.tolist() == [2, 3, 1, 2]  # (1, 2) at 0 -> 3, 1, then the root itself


def test_candidates_merge_into_a_tree():
    context = [1, 2, 3, 4, 0, 1, 2, 3, 5, 0, 1, 2, 7, 0, 1]
    d = NgramDrafter(max_ngram=2, num_draft=3, candidates=3)
    tree = d.propose(2, context)  # (1, 2) followed by 7 0 1 / 3 5 0 / 3 4 0
    check_parents(tree.parents)
    rows = [[tree.tokens[i].item() for i in row if i >= 0] for row in paths(tree.parents).tolist()]
    assert sorted(rows) == [[2, 3, 4, 0], [2, 3, 5, 0], [2, 7, 0, 1]]
    assert tree.size == 1 + 3 + 3 + 2  # the shared "3" is one node


@given(st.lists(st.integers(0, 4), min_size=1, max_size=60), st.integers(1, 4), st.integers(1, 6))
@settings(max_examples=200, deadline=None)
def test_every_proposal_really_followed_the_suffix(seq, max_ngram, num_draft):
    conts = find_continuations(seq, max_ngram=max_ngram, min_ngram=1, num_draft=num_draft, candidates=1)
    if not conts:
        # nothing found: not even the last token occurs earlier with a follower
        assert seq[-1] not in seq[:-1]
        return
    cont = conts[0]
    assert 1 <= len(cont) <= num_draft
    ok = False
    for n in range(1, max_ngram + 1):
        for s in range(len(seq) - n):
            if seq[s : s + n] == seq[-n:] and seq[s + n : s + n + len(cont)] == cont:
                ok = True
    assert ok
