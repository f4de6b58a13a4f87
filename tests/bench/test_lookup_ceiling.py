"""The lookup_ceiling suite (benchmarks/suites/lookup_ceiling.py): the hindsight schedule it reports as the most copying could win."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ceiling():
    return importlib.import_module("benchmarks.suites.lookup_ceiling")


CURVE = {r: 10.0 + 5.0 * r for r in range(1, 13)}  # t(r) = 10 + 5 r: 15 for one row, 35 for five


def test_a_lane_alone_pays_the_pass_and_a_busy_lane_its_share(ceiling):
    assert ceiling.step_cost(CURVE, 1, 0) == 15.0
    assert ceiling.step_cost(CURVE, 1, 4) == 35.0
    assert ceiling.step_cost(CURVE, 4, 0) == 30.0 / 4  # four plain rows share one pass
    assert ceiling.step_cost(CURVE, 4, 4) == 30.0 / 4 + 20.0  # plus the four rows it adds


def test_nothing_to_copy_is_plain_decoding(ceiling):
    price = [ceiling.step_cost(CURVE, 1, c) for c in range(ceiling.DEPTH + 1)]
    assert ceiling.cheapest([0] * 10, price) == pytest.approx(9 * 15.0)


def test_a_copy_is_cut_where_it_pays(ceiling):
    price = [ceiling.step_cost(CURVE, 1, c) for c in range(ceiling.DEPTH + 1)]
    # 9 tokens after the first; at position 1 a chain agrees with the next 8: one pass of 9 rows
    runs = [0, 8, 7, 6, 5, 4, 3, 2, 1, 0]
    assert ceiling.cheapest(runs, price) == pytest.approx(price[8])
    # a chain that agrees with 1 token at every position: each step 2 rows for 2 tokens (20 vs 30)
    assert ceiling.cheapest([0] + [1] * 9, price) == pytest.approx(4 * price[1] + price[0])


def test_the_hindsight_runs_follow_the_answer(ceiling):
    from homespec.speculative.drafters.suffix import SuffixStore

    prompt = [5, 6, 7, 8, 9, 10, 11, 12]
    answer = [1, 5, 6, 7, 8, 9, 10, 11, 12]
    runs = ceiling.accepted_runs(prompt, answer, SuffixStore())
    # after "1 5" the prompt's "5" is followed by 6 7 8 ...: the answer goes on with all of it
    assert runs[2] == 7 and runs[len(answer) - 1] == 1
