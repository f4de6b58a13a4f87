"""homespec.speculative.choice: the guard's per-lane choice among a lookup's chain, the suffix store's,
a model's draft and plain decoding, on counted costs (pure, no model)."""

from __future__ import annotations

import pytest

from homespec.contracts.drafter import Offer
from homespec.speculative.choice import PLAIN, Choice, CopyStats, bucket, choose_each, forced
from homespec.speculative.guard import BatchGuard

CPU = {1: 0.0125, 2: 0.016, 5: 0.032, 9: 0.0563, 17: 0.105, 128: 0.52}  # this CPU, SmolLM2 (docs/speculative.md)
GPU = {1: 0.010, 9: 0.0101, 17: 0.0102, 128: 0.02}  # memory-bound: rows nearly free


def _guard(table, **kw) -> BatchGuard:
    g = BatchGuard(depth=4, prior=(0.52, 0.30, 0.15, 0.08), **kw)
    for rows, t in table.items():
        g.record_pass(rows, t)
    return g


def _copy(n: int, match: int, source: str = "ngram") -> Offer:
    return Offer(source, tuple(range(100, 100 + n)), match)


def test_the_docstring_example():
    """A 16-token match of 4 tokens verifies on this CPU; a 1-token match does not."""
    g = _guard({1: 0.0125, 5: 0.032, 128: 0.52})
    g.copies = CopyStats(prior={("ngram", 16): (0.9, 0.81, 0.73, 0.66), ("ngram", 1): (0.15, 0.13, 0.11, 0.09)})
    (c,) = choose_each(g, [[_copy(4, 16)]], 0)
    assert c.offer.key == 16 and c.depth == 4 and c.source == "ngram"
    assert g.predicted == pytest.approx((1 + 0.9 + 0.81 + 0.73 + 0.66) / 0.032 / (1 / 0.0125))
    assert choose_each(g, [[_copy(4, 1)]], 0) == [PLAIN]


def test_a_cpu_cuts_a_long_copy_to_what_pays_and_a_gpu_takes_it_whole():
    offer = _copy(16, 32)
    (cpu,) = choose_each(_guard(CPU), [[offer]], 0)
    (gpu,) = choose_each(_guard(GPU), [[offer]], 0)
    assert 1 <= cpu.depth < 16 and gpu.depth == 16


def test_the_eagle_tree_is_priced_by_the_same_table():
    """With no copy on offer the head drafts where rows are cheap, not on this CPU; and a good
    copy beats the head's tree at equal rows, whose drafting costs time."""
    eagle = Offer("eagle3")
    cpu, gpu = _guard(CPU), _guard(GPU)
    cpu.draft_level_s, gpu.draft_level_s = 0.003, 0.0005
    assert cpu.choose_lanes([[eagle]]) == [PLAIN]
    assert gpu.choose_lanes([[eagle]])[0].source == "eagle3"
    (c,) = choose_each(gpu, [[_copy(8, 32), eagle]], 0)
    assert c.source == "ngram"


def test_each_lane_chooses_for_itself():
    """One lane copying a file, one chatting: the copy is verified, the chat decodes plainly."""
    g = _guard(CPU)
    copying, chatting = choose_each(g, [[_copy(4, 24)], [_copy(4, 1)]], 0)
    assert copying.source == "ngram" and chatting == PLAIN
    assert [c.source for c in choose_each(_guard(GPU), [[], [_copy(4, 24)], []], 0)] == [None, "ngram", None]


def test_a_lookup_learns_by_match_length_and_its_loss_starts_no_backoff():
    g = _guard(CPU)
    before = g.copies.alpha("ngram", 6, 1)
    for _ in range(20):
        g.record_copy("ngram", 6, 4, 0)
    assert g.copies.alpha("ngram", 7, 1) < before / 4  # 7 shares 6's bucket
    assert g.copies.alpha("ngram", 8, 1) > 0.5  # another bucket is untouched
    assert choose_each(g, [[_copy(4, 6)]], 0) == [PLAIN]
    assert g.plain_left == 0 and g.losses == 0


def test_the_backoff_keeps_model_drafts_out_but_not_copies():
    g = _guard(GPU)
    g.record_step(1, 0, tokens=1, seconds=1.0)  # a model draft that lost badly
    assert g.plain_left > 0
    (c,) = g.choose_lanes([[_copy(8, 32), Offer("eagle3")]])
    assert c.source == "ngram"
    assert g.choose_lanes([[Offer("eagle3")]]) == [PLAIN]


def test_forced_and_unmeasured():
    eagle = Offer("eagle3")
    assert forced([_copy(3, 2), _copy(5, 1, "suffix"), eagle], 4) == Choice(_copy(5, 1, "suffix"), 5)
    assert forced([eagle], None) == Choice(eagle, None)
    assert forced([], 4) == PLAIN
    assert BatchGuard(depth=4).choose_lanes([[_copy(4, 32)]]) == [PLAIN]  # nothing measured yet
    assert BatchGuard(depth=4, forced=True).choose_lanes([[_copy(4, 32)]]) == [Choice(_copy(4, 32), 4)]


def test_match_lengths_fall_in_buckets():
    assert [bucket(n) for n in (0, 1, 3, 5, 7, 8, 31, 32, 500)] == [1, 1, 3, 4, 6, 8, 24, 32, 32]
