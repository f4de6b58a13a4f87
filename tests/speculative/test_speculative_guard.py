"""homespec.speculative.guard: the batch guard's choice from measured costs (pure, no model)."""

from __future__ import annotations

import math

from homespec.speculative.guard import BatchGuard

PRIOR = (0.7, 0.5, 0.35, 0.25)


def _fed(guard: BatchGuard, cost) -> BatchGuard:
    for rows in (1, 2, 4, 8, 40, 128):
        guard.record_pass(rows, cost(rows))
    return guard


def test_compute_bound_costs_keep_speculation_off():
    """A CPU: every row costs almost a whole forward, so no draft depth pays at any batch."""
    g = _fed(BatchGuard(depth=4, prior=PRIOR), lambda rows: 0.010 * rows)
    assert [g.choose(n) for n in (1, 2, 4, 8)] == [0, 0, 0, 0]
    assert g.predicted is not None and g.predicted < 1


def test_memory_bound_costs_turn_speculation_on():
    """A GPU: a pass costs about the same for 1 or 40 rows, so drafting deep pays."""
    g = _fed(BatchGuard(depth=4, prior=PRIOR), lambda rows: 0.010 + 0.00001 * rows)
    assert g.choose(1) == 4
    assert g.choose(8) >= 1


def test_the_marginal_cost_at_the_batch_decides():
    """Cheap rows up to 16, dear beyond: a deep draft for one sequence, one level for eight."""
    g = _fed(BatchGuard(depth=4, prior=PRIOR), lambda rows: 0.010 if rows <= 16 else 0.010 * rows / 16 * 3)
    for rows in (3, 5, 16, 24, 32):
        g.record_pass(rows, 0.010 if rows <= 16 else 0.010 * rows / 16 * 3)
    assert g.choose(1) == 4  # 5 rows: as cheap as 1
    assert g.choose(8) == 1  # 16 rows are, 24 are not


def test_measured_rejections_override_the_prior():
    g = _fed(BatchGuard(depth=4, prior=PRIOR), lambda rows: 0.010 + 0.001 * rows)
    assert g.choose(1) > 0
    for _ in range(64):
        g.record_draft(drafted=4, accepted=0, levels=4, seconds=0.004)
    assert g.alpha(1) < 0.1
    assert g.choose(1) == 0


def test_forced_and_unmeasured():
    assert BatchGuard(depth=3, forced=True).choose(8) == 3
    assert BatchGuard(depth=3, prior=PRIOR).choose(8) == 0  # nothing measured yet: a plain step first
    assert BatchGuard(depth=3).choose(0) == 0


def test_a_speculative_step_that_loses_backs_off():
    """Noise made 8 rows look as cheap as 4; the step run at that choice loses and plain steps follow."""
    g = _fed(BatchGuard(depth=1, prior=PRIOR), lambda rows: 0.010 * rows)
    g.costs[8] = 0.040  # a lucky measurement
    assert g.choose(4) == 1
    g.record_step(4, 0, tokens=6, seconds=0.080)  # what it really cost: 6 tokens in 80 ms, plain 4 in 40
    assert [g.choose(4) for _ in range(g.backoff)] == [0] * g.backoff
    assert g.losses == 1


def test_an_unmeasured_row_count_is_read_between_its_measured_neighbours():
    """A CPU table (one row dear, prompt chunks cheaper per row): 16 rows lie between 8 and 48,
    not on a line through 1 and 397, which would price the rows a draft adds too low."""
    table = {1: 0.0357, 4: 0.0873, 8: 0.1649, 48: 0.4505, 397: 3.5348}  # docs/server.md's worked example
    g = BatchGuard(depth=4, prior=(0.40, 0.14, 0.10, 0.10))
    g.draft_level_s = 0.0168
    for rows, t in table.items():
        g.record_pass(rows, t)
    assert abs(g.cost(16) - (0.1649 + 8 / 40 * (0.4505 - 0.1649))) < 1e-9
    assert abs(g.cost(2) - (0.0357 + (0.0873 - 0.0357) / 3)) < 1e-9
    assert g.cost(500) > g.cost(397)  # beyond the table: its last segment, continued
    assert g.cost(8) == 0.1649
    assert [g.choose(n) for n in (1, 4, 8)] == [0, 0, 0]


def test_one_measured_row_count_scales_through_the_origin():
    g = BatchGuard(depth=2, prior=PRIOR)
    g.record_pass(4, 0.040)
    assert abs(g.cost(8) - 0.080) < 1e-12


def test_a_dear_loss_buys_a_longer_backoff():
    """8 sequences: a speculative step took three plain steps' time for 1.4 steps' tokens. 16
    plain steps would leave probing at 2 / 17 of the time; the guard waits until the loss is
    the margin (3 %) of the plain time since."""
    g = _fed(BatchGuard(depth=1, prior=PRIOR), lambda rows: 0.010 * rows)
    t_plain = g.cost(8)
    g.record_step(8, 0, tokens=11, seconds=3 * t_plain)
    lost = 3 * t_plain - 11 / (8 / t_plain)
    assert g._plain_left == math.ceil(lost / (g.margin * t_plain)) > 16
    g.record_step(8, 0, tokens=7, seconds=1.05 * t_plain)  # a small loss in a row still doubles
    assert g._plain_left == min(g.max_backoff, 2 * math.ceil(lost / (g.margin * t_plain)))


def test_one_slow_pass_moves_no_cost():
    """The machine's other work slowed one pass fourfold: the median of the latest passes ignores it."""
    g = _fed(BatchGuard(depth=4, prior=PRIOR), lambda rows: 0.010 * rows)
    for _ in range(3):
        g.record_pass(1, 0.010)
    g.record_pass(1, 0.040)
    assert g.cost(1) == 0.010


def test_a_row_count_is_never_dearer_than_a_larger_one():
    """A slow first 1-row pass must not price plain decoding above a 2-row draft (it did: the
    guard then drafted every step, and no 1-row pass ever corrected the figure)."""
    g = BatchGuard(depth=4, prior=PRIOR)
    g.record_pass(1, 0.041)
    for rows, t in ((2, 0.0186), (5, 0.034), (40, 0.13)):
        g.record_pass(rows, t)
    assert g.cost(1) == 0.0186
    assert g.cost(3) <= g.cost(5) == 0.034


def test_plain_decodings_cost_is_measured_again_when_old():
    """Drafts every step measure only their own row counts; after REFRESH passes without a plain
    one, a plain step runs to measure it."""
    from homespec.speculative.guard import REFRESH

    g = _fed(BatchGuard(depth=4, prior=PRIOR), lambda rows: 0.010 + 0.00001 * rows)
    assert g.choose(1) == 4
    for _ in range(REFRESH):
        g.record_pass(5, 0.010)
    assert g.choose(1) == 0
    g.record_pass(1, 0.010)
    assert g.choose(1) == 4


LOOKUPS = {"ngram": 8, "suffix": 8}


def test_no_chain_can_pay_on_compute_bound_rows():
    """A CPU on one thread (measured: 1 row 6.8 ms, 2 rows 17.4, 9 rows 61): even a chain of 8
    from the longest match, at its prior acceptance, loses to plain decoding: no search at all."""
    g = BatchGuard(depth=4, prior=PRIOR)
    for rows, ms in ((1, 6.8), (2, 17.4), (9, 61.0), (128, 700.0)):
        g.record_pass(rows, ms / 1e3)
    assert g.match_floor(1, 0, LOOKUPS) == 0


def test_where_rows_are_cheap_every_match_is_worth_a_search():
    """A GPU (rows nearly free): even a one-token match's chain (P(first accepted) 0.15) pays."""
    g = _fed(BatchGuard(depth=4, prior=PRIOR), lambda rows: 0.010 + 0.00001 * rows)
    assert g.match_floor(1, 0, LOOKUPS) == 1


def test_the_floor_is_the_shortest_match_whose_chain_pays():
    """Rows at a quarter of a plain step each: by the prior (choice.FIRST, FOLLOW) a one-token
    match's chain loses and a two-token match's wins (1.3 tokens for 1.25 steps' time). The floor
    is what the choice itself would take, bucket by bucket."""
    from homespec.contracts.drafter import Offer
    from homespec.speculative.choice import BUCKETS, options

    g = _fed(BatchGuard(depth=4, prior=PRIOR), lambda rows: 0.010 * (0.75 + 0.25 * rows))
    plain = 1 / g.cost(1)

    def chosen(length: int) -> bool:
        opts = options(g, [Offer("ngram", tuple(range(8)), length)], False)
        return max(t / g.cost(r) for _, r, t, _ in opts) >= plain * (1 + g.margin)

    assert g.match_floor(1, 0, {"ngram": 8}) == next(b for b in BUCKETS if chosen(b)) == 2


def test_what_chains_earn_moves_the_floor():
    """Copies from 1-token matches accepted in full, again and again: the floor falls to 1."""
    g = BatchGuard(depth=4, prior=PRIOR)
    for rows, ms in ((1, 10.0), (2, 12.0), (9, 30.0)):
        g.record_pass(rows, ms / 1e3)
    before = g.match_floor(1, 0, LOOKUPS)
    assert before > 1
    for _ in range(40):
        g.record_copy("suffix", 1, 8, 8)
    assert g.match_floor(1, 0, LOOKUPS) == 1  # learnt at once: the verdict is not kept past a lesson


def test_a_verdict_stands_until_the_table_is_read_again():
    """The floor is kept RECHECK passes (no per-step price), then read off the costs measured since."""
    from homespec.speculative.guard import RECHECK, SAMPLES

    g = BatchGuard(depth=4, prior=PRIOR)
    for rows, ms in ((1, 6.8), (2, 17.4), (9, 61.0)):
        g.record_pass(rows, ms / 1e3)
    assert g.match_floor(1, 0, LOOKUPS) == 0
    for _ in range(SAMPLES):
        g.record_pass(2, 0.0070)  # the machine's other work is gone: 2 rows now cost one's time
        g.record_pass(9, 0.0075)
    assert g.match_floor(1, 0, LOOKUPS) == 0  # fewer than RECHECK passes since the verdict
    for _ in range(RECHECK):
        g.record_pass(1, 0.0068)
    assert g.match_floor(1, 0, LOOKUPS) >= 1


def test_a_forced_guard_always_lets_the_lookups_search():
    g = BatchGuard(depth=4, forced=True)
    assert g.match_floor(1, 0, LOOKUPS) == 1


def test_a_head_that_cannot_pay_is_not_priced_again_every_step():
    """No depth paid: the verdict stands RECHECK passes (the step asks nothing of the table), then
    the costs measured since are read; a row count measured the first time reads them at once."""
    from homespec.speculative.guard import RECHECK

    g = BatchGuard(depth=4, prior=PRIOR)
    for rows, ms in ((1, 6.8), (2, 17.4), (5, 40.0)):
        g.record_pass(rows, ms / 1e3)
    assert g.choose(1) == 0
    for _ in range(5):
        g.record_pass(5, 0.007)  # 5 rows suddenly as cheap as one
    assert g.choose(1) == 0  # fewer than RECHECK passes since the verdict
    for _ in range(RECHECK):
        g.record_pass(1, 0.0068)
    assert g.choose(1) > 0
    g = BatchGuard(depth=4, prior=PRIOR)
    for rows, ms in ((1, 6.8), (5, 40.0)):
        g.record_pass(rows, ms / 1e3)
    assert g.choose(1) == 0
    g.record_pass(3, 0.007)  # a new row count: the verdict is read again
    assert g.choose(1) > 0
