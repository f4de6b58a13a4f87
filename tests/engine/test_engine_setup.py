"""One set-up pass per run (homespec.engine.setup): the options checked, the model resolved and its header
read, and one plan made, once per `serve` start; the RunSetup every later stage reads.

The counts are taken on the real functions with a profile hook (sys.setprofile), which sees every call
of a function's code however it was imported: nothing is replaced."""

from __future__ import annotations

import dataclasses
import sys
from collections import Counter
from contextlib import contextmanager

import pytest

from homespec.engine.options import RunOptions, check_options
from homespec.engine.setup import DEFAULT_PARALLEL, RunSetup, set_up
from homespec.errors import UsageError
from homespec.formats.gguf import read_gguf_header
from homespec.plan.api import PlanRequest, make_plan
from homespec.server.launch import Serving, open_engine

CHAIN = {"ctx": 384, "draft_depth": 4, "draft_topk": 1, "draft_tokens": 5, "threads": 1}


@contextmanager
def calls_of(*functions):
    """Count the calls of `functions` on this thread while the block runs."""
    codes = {f.__code__: f.__qualname__ for f in functions}
    counts: Counter[str] = Counter()

    def hook(frame, event, arg):
        if event == "call" and frame.f_code in codes:
            counts[codes[frame.f_code]] += 1

    old = sys.getprofile()
    sys.setprofile(hook)
    try:
        yield counts
    finally:
        sys.setprofile(old)


@pytest.mark.parametrize("parallel", [None, 2])
def test_a_serve_start_checks_reads_and_plans_once(smollm2_path, tmp_path, parallel):
    """serve without --parallel chooses its lanes inside the one plan; with --parallel it plans them.
    The model is linked under a new name, which no earlier test's run has read."""
    model = tmp_path / "model.gguf"
    model.symlink_to(smollm2_path)
    opts = RunOptions(model=str(model), method="ngram", **CHAIN)
    with calls_of(make_plan, check_options, read_gguf_header) as counts:
        engine, sock, path = open_engine(opts, Serving(port=0, parallel=parallel))
    try:
        assert counts["make_plan"] == 1
        assert counts["check_options"] == 1
        assert counts["read_gguf_header"] == 1
        assert engine.slots == (DEFAULT_PARALLEL if parallel is None else parallel)
        assert engine.parts.plan.settings.n_seq == engine.slots
        assert engine.lane_ctx == CHAIN["ctx"]  # each lane holds --ctx tokens
    finally:
        engine.close(timeout_s=5.0)
        sock.close()


def test_the_setup_is_one_frozen_value_every_stage_reads(smollm2_path):
    setup = set_up(RunOptions(model=str(smollm2_path), method="none", **CHAIN), parallel=3)
    assert isinstance(setup, RunSetup)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setup.parallel = 4  # type: ignore[misc]
    assert setup.model_path == str(smollm2_path) and setup.lane_ctx == CHAIN["ctx"]
    assert (setup.plan.settings.n_seq, setup.plan.settings.n_ctx) == (3, CHAIN["ctx"])
    assert not setup.traits.recurrent and setup.traits.mtp == 0


def test_a_one_lane_run_may_start_without_a_plan(smollm2_path):
    setup = set_up(RunOptions(model=str(smollm2_path), method="none", **CHAIN), with_plan=False)
    assert setup.plan is None and setup.parallel == 1
    several = set_up(RunOptions(model=str(smollm2_path), method="none", **CHAIN), parallel=2, with_plan=False)
    assert several.plan is not None  # lanes are always planned: their KV is the plan's


def test_lanes_chosen_inside_one_plan_are_the_plan_for_that_many(smollm2_path):
    """The plan the choice returns is byte for byte the plan `--parallel N` makes."""
    opts = RunOptions(model=str(smollm2_path), method="ngram", **CHAIN)
    chosen = set_up(opts, parallel=None)
    asked = set_up(opts, parallel=chosen.parallel)
    assert chosen.plan == asked.plan


def test_one_lane_where_lanes_cannot_run(smollm2_path):
    opts = RunOptions(model=str(smollm2_path), method="none", exact=True, **CHAIN)
    assert set_up(opts, parallel=None).parallel == 1
    with pytest.raises(UsageError, match="--exact"):
        set_up(opts, parallel=2)


def test_plan_request_choice_keeps_the_verdict_of_one_sequence():
    """A 70B on a 4090 at a long context: more lanes would push more layers off the GPU, so one."""
    one = make_plan(PlanRequest(model="llama-3.1-70b-q4", gpu="4090", ram=64, ctx=131072, draft="none"))
    chosen = make_plan(PlanRequest(model="llama-3.1-70b-q4", gpu="4090", ram=64, ctx=131072, draft="none",
                                   lanes_up_to=4))
    assert chosen == one
    small = make_plan(PlanRequest(model="llama-3.1-8b-q4", gpu="4090", ram=64, ctx=4096, draft="none",
                                  lanes_up_to=4))
    assert small.settings.n_seq == 4


def test_plan_request_holds_every_planning_option_of_homespec_plan():
    """`homespec plan` hands make_plan one PlanRequest: each of its options that shapes the plan is a field
    of the same name (the rest only say how the plan is printed)."""
    import inspect

    from homespec.cli.plan import plan as plan_command

    printing = {"emit", "gpu_memory_utilization", "json_out"}
    options = set(inspect.signature(plan_command).parameters) - printing
    fields = {f.name for f in dataclasses.fields(PlanRequest)}
    assert options <= fields
    assert fields - options == {"lanes_up_to", "rollback", "rollback_saves"}  # what a run adds


def test_choosing_the_lanes_and_giving_them_is_refused():
    with pytest.raises(UsageError, match="two things"):
        make_plan(PlanRequest(model="llama-3.1-8b-q4", gpu="4090", ram=64, parallel=2, lanes_up_to=4))
