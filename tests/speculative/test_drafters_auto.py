"""The auto drafter's lookups behind one lane (speculative/drafters/auto.py), without a head: one
search serves both lookups, their offers equal each lookup's own, and the lane's state follows every
committed token. With the EAGLE head it runs in tests/engine/test_engine_auto.py."""

from __future__ import annotations

from homespec.contracts.drafter import DraftShape
from homespec.speculative.drafters.auto import AutoDrafter
from homespec.speculative.drafters.ngram import NgramDrafter
from homespec.speculative.drafters.suffix import SuffixDrafter, SuffixStore

CONTEXT = [4, 5, 6, 7, 1, 2, 9, 9, 4, 5, 6, 7]


def _auto(store: SuffixStore) -> AutoDrafter:
    return AutoDrafter([NgramDrafter(max_ngram=3, num_draft=3), SuffixDrafter(store, num_draft=3)])


def test_its_offers_are_each_lookups_own_from_one_search():
    store = SuffixStore()
    auto = _auto(store)
    auto.begin(CONTEXT[:4], None)
    alone = NgramDrafter(max_ngram=3, num_draft=3).offers(1, CONTEXT) + SuffixDrafter(store, 3).offers(1, CONTEXT)
    assert auto.offers(1, CONTEXT) == alone
    assert [o.source for o in alone] == ["ngram", "suffix"] and alone[0].tokens == (2, 9, 9)
    assert auto.offers(42, [3]) == ()  # nothing matches: nothing offered, and no model to promise a draft


def test_without_a_head_it_proposes_the_longest_chain_and_shapes_its_first_lookup():
    auto = _auto(SuffixStore())
    auto.begin(CONTEXT[:4], None)
    assert auto.propose(1, CONTEXT).tokens.tolist() == [1, 2, 9, 9]
    assert auto.shape == DraftShape(3, 1, 4) and auto.set_shape(2, 3) == DraftShape(2, 1, 3)
    assert auto.trim(5) == 5 and auto.expected_acceptance is None and auto.feature_layers == ()


def test_what_a_lane_commits_is_drafted_for_the_next():
    store = SuffixStore()
    writer, reader = _auto(store), _auto(store)
    writer.begin([8, 8], None)
    writer.accept([30, 31, 32, 33, 34], None, 35)
    reader.begin([7, 7], None)
    suffix = [o for o in reader.offers(32, [7, 7, 30, 31]) if o.source == "suffix"]
    assert suffix and suffix[0].tokens == (33, 34)
