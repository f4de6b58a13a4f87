"""`plan --max-parallel`: the largest number of sequences of --ctx tokens that fit (homespec.plan.parallel)."""

from __future__ import annotations

import pytest

from homespec.errors import UsageError
from homespec.plan.api import PlanRequest, make_plan
from homespec.plan.fit import FITS
from homespec.plan.lines import LineKind


@pytest.mark.parametrize("model,gpu,ram,ctx", [("llama-3.1-8b-q4", "4090", 64, 32768), (None, "none", 16, 8192)])
def test_max_parallel_is_the_largest_n_that_fits(model, gpu, ram, ctx):
    best = make_plan(PlanRequest(model=model, gpu=gpu, ram=ram, ctx=ctx, max_parallel=True))
    n = best.settings.n_seq
    assert n > 1 and best.fits
    again = make_plan(PlanRequest(model=model, gpu=gpu, ram=ram, ctx=ctx, parallel=n))
    assert again.items == best.items  # the same plan as asking for N
    more = make_plan(PlanRequest(model=model, gpu=gpu, ram=ram, ctx=ctx, parallel=n + 1))
    one = make_plan(PlanRequest(model=model, gpu=gpu, ram=ram, ctx=ctx))
    assert more.verdict != one.verdict or not more.fits  # N + 1 leaves the GPUs, or does not fit
    assert any(f"--max-parallel: {n} sequence(s) of {ctx} tokens fit" in x for x in best.notes)


def test_each_sequence_brings_the_drafts_kv_too():
    with_draft = make_plan(PlanRequest(model="llama-3.1-8b-q4", gpu="4090", ram=64, ctx=32768, max_parallel=True))
    without = make_plan(PlanRequest(model="llama-3.1-8b-q4", gpu="4090", ram=64, ctx=32768, max_parallel=True, draft="none"))
    assert without.settings.n_seq >= with_draft.settings.n_seq
    draft_kv = sum(i.bytes for i in with_draft.items if i.kind == LineKind.DRAFT_KV)
    one = make_plan(PlanRequest(model="llama-3.1-8b-q4", gpu="4090", ram=64, ctx=32768))
    # each lane brings its own cells; llama.cpp pads the whole cache (not each lane) to 256 cells
    per_lane = sum(i.bytes for i in one.items if i.kind == LineKind.DRAFT_KV)
    assert draft_kv == pytest.approx(with_draft.settings.n_seq * per_lane, rel=0.01)
    assert draft_kv <= with_draft.settings.n_seq * per_lane


def test_parallel_and_max_parallel_together_is_a_usage_error():
    with pytest.raises(UsageError):
        make_plan(PlanRequest(model=None, gpu="none", ram=16, parallel=2, max_parallel=True))


def test_nothing_fits_says_so():
    p = make_plan(PlanRequest(model="llama-3.1-405b-q4", gpu="none", ram=16, max_parallel=True))
    assert not p.fits and p.settings.n_seq == 1 and p.verdict != FITS
    assert any("not even one sequence" in x for x in p.notes)
