"""serve's default slots on machines where four sequences do not fit: the real planner on plan's
--gpu profiles and a catalogue model (no file, no machine probe)."""

from __future__ import annotations

import pytest

from homespec.engine.setup import default_parallel
from homespec.engine.options import RunOptions


@pytest.mark.parametrize(("ctx", "want"), [(32768, 4), (65536, 2), (131072, 1)])
def test_the_most_slots_that_fit_as_one_does(ctx, want):
    # Llama 3.1 8B Q4 on a 24 GB RTX 4090: 1 x 128k, 2 x 64k or 4 x 32k tokens of KV fit on the card
    opt = RunOptions(method="eagle3", ctx=ctx)
    assert default_parallel(opt, "llama-3.1-8b-q4", gpu="4090") == want
    assert default_parallel(RunOptions(method="none", ctx=ctx), "llama-3.1-8b-q4", gpu="4090") == want


def test_a_run_whose_one_sequence_already_spills_keeps_the_spill_it_had():
    # a 70B target spills layers to the CPU already at one sequence; every further sequence's KV
    # would push more of them off the card, so the default stays one slot
    assert default_parallel(RunOptions(method="none", ctx=131072), "llama-3.1-70b-q4", gpu="4090") == 1


def test_a_draft_model_run_is_served_one_sequence_at_a_time():
    assert default_parallel(RunOptions(method="draft", ctx=4096), "llama-3.1-8b-q4", gpu="4090") == 1
