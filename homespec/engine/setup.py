"""One set-up pass per run: `set_up(opt) -> RunSetup`, made once by generate, chat, bench and serve.

    1. check the options (homespec.engine.options.check_options: the model resolved, its header read,
       every range checked; nothing loads before they pass);
    2. a recurrent state verifies chains: a tree shape becomes the chain of its depth;
    3. plan once, as `homespec plan` would with the same arguments, with KV for the run's lanes of
       opt.ctx tokens each; serve without --parallel chooses the lanes inside that one plan
       (PlanRequest.lanes_up_to).

Every later stage (the prompts' check, homespec.engine.assemble.prepare, the server's start line) reads
the RunSetup; none checks, resolves or plans again.
"""

from __future__ import annotations

from dataclasses import dataclass

from homespec.backends.registry import BACKENDS
from homespec.engine.options import (
    ModelTraits, RunOptions, chains_for, check_options, draft_for_plan, model_traits, rollback_for, rollback_saves,
)
from homespec.errors import UsageError
from homespec.plan.api import PlanRequest, make_plan
from homespec.plan.fit import Plan
from homespec.speculative.methods import method_entry

# Lanes `homespec serve` opens by default where their KV fits: enough for a few users at once, few
# enough that each keeps most of one sequence's speed (docs/server.md, "Benchmark" measures both).
DEFAULT_PARALLEL = 4


@dataclass(frozen=True, slots=True)
class RunSetup:
    """A run's options after their one check, and everything derived from them before weights load."""

    options: RunOptions  # checked; a tree shape made a chain where the model keeps a recurrent state
    model_path: str  # the target resolved once: a local GGUF file or model directory
    traits: ModelTraits  # read off its header once
    parallel: int  # lanes, each of options.ctx tokens
    plan: Plan | None  # None: a one-lane run asked to start from its options alone

    @property
    def lane_ctx(self) -> int:
        """Tokens of KV each lane holds: the one source of the per-lane context (limits.CTX checked it)."""
        return self.options.ctx


def set_up(opt: RunOptions, *, parallel: int | None = 1, with_plan: bool = True, gpu: str | None = None) -> RunSetup:
    """Check, resolve and plan once. `parallel` None: the most lanes (up to DEFAULT_PARALLEL) whose KV
    the plan fits as well as one's. `gpu`: plan for plan's --gpu instead of this machine."""
    path = check_options(opt)
    opt = chains_for(opt, path)
    if parallel is None:
        parallel = DEFAULT_PARALLEL if lanes_possible(opt) else 1
        plan: Plan | None = plan_for_run(opt, path, gpu=gpu, lanes_up_to=parallel)
        parallel = plan.settings.n_seq
    else:
        check_parallel(opt, parallel)
        plan = plan_for_run(opt, path, gpu=gpu, parallel=parallel) if with_plan or parallel > 1 else None
    return RunSetup(options=opt, model_path=path, traits=model_traits(path), parallel=parallel, plan=plan)


def check_parallel(opt: RunOptions, parallel: int) -> None:
    if parallel < 1:
        raise UsageError(f"--parallel {parallel} is not positive", hint="pass --parallel 1 or more")
    if parallel == 1:
        return
    if not BACKENDS[opt.backend].lanes:
        raise UsageError(f"--parallel {parallel}: the {opt.backend} backend decodes one sequence at a time",
                         hint="use --parallel 1 (requests then wait in the queue), or a GGUF with --backend llamacpp")
    method = method_entry(opt.method)
    if method.speculative and method.clone is None:
        raise UsageError(f"--parallel {parallel}: several lanes draft with auto, eagle3, mtp, ngram, suffix or none",
                         hint="use --parallel 1 with --method draft")
    if opt.exact:
        raise UsageError(f"--parallel {parallel}: --exact verifies one sequence at a time",
                         hint="use --parallel 1 with --exact")


def lanes_possible(opt: RunOptions) -> bool:
    """Whether these options can run several lanes at all (not torch, EXL2, --method draft, --exact)."""
    try:
        check_parallel(opt, 2)
    except UsageError:
        return False
    return True


def plan_for_run(opt: RunOptions, path: str, *, gpu: str | None = None, parallel: int = 1,
                 lanes_up_to: int | None = None) -> Plan:
    """The plan a run starts its target with (backends/registry.py: settings_for): `homespec plan`
    with the same arguments (the same defaults, homespec.plan.settings) on this machine, or on
    `gpu` (plan's --gpu); the torch backend on --device cpu is planned for the CPU. `parallel`:
    sequences served at once, each with opt.ctx cells of KV (plan's --parallel); `lanes_up_to`: let
    the plan choose them (PlanRequest.lanes_up_to)."""
    if gpu is None:
        gpu = "none" if BACKENDS[opt.backend].torch_device and opt.device == "cpu" else "auto"
    return make_plan(PlanRequest(
        model=path, gpu=gpu, draft=draft_for_plan(opt, path), ctx=opt.ctx, backend=opt.backend,
        draft_tokens=opt.draft_tokens, draft_depth=opt.draft_depth, draft_topk=opt.draft_topk, parallel=parallel,
        lanes_up_to=lanes_up_to, draft_dtype=opt.draft_dtype, rollback=rollback_for(opt, path),
        rollback_saves=rollback_saves(opt)))


def default_parallel(opt: RunOptions, path: str, *, gpu: str | None = None) -> int:
    """The lanes serve opens when --parallel is left out, for `path` planned on `gpu` (None: this machine)."""
    if not lanes_possible(opt):
        return 1
    return plan_for_run(opt, path, gpu=gpu, lanes_up_to=DEFAULT_PARALLEL).settings.n_seq
