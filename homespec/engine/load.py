"""What a batched engine is opened with: the target for `parallel` sequences (planned as
`homespec plan` plans it, with KV for every sequence), a drafter per sequence, and the guard.

Reuses session/load.py (the plan, the first drafter: head loading, window, recorded acceptance);
the other sequences' EAGLE drafters share the first one's head weights, each with its own head KV.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from homespec.errors import UsageError
from homespec.session.options import RunOptions, check_options, threads_of

if TYPE_CHECKING:
    from homespec.backends.llamacpp.multi import MultiSeqBackend
    from homespec.engine.guard import BatchGuard
    from homespec.plan.fit import Plan
    from homespec.speculative.drafters.base import Drafter, DraftShape

# Micro-batch rows below which a sequence's numbers do not depend on what shares its batch: under
# 64 query rows llama.cpp's CPU flash attention treats each row on its own (docs/backends.md,
# "the 64-row limit"). `ubatch=BATCH_INVARIANT_UBATCH` buys bit-identical answers at a prefill
# ~3.5x slower on this CPU (docs/server.md, "Engine"); the default keeps the plan's 512.
BATCH_INVARIANT_UBATCH = 32
# Slots `homespec serve` opens by default where their KV fits: enough for a few users at once, few
# enough that each keeps most of one sequence's speed (docs/server.md, "Benchmark" measures both).
DEFAULT_PARALLEL = 4


@dataclass
class EngineParts:
    backend: "MultiSeqBackend"
    drafters: list["Drafter | None"]  # one per slot
    guard: "BatchGuard | None"  # None: no drafter
    model_path: str
    plan: "Plan"
    shape: "DraftShape | None"  # the drafters' shape as loaded


def default_parallel(opt: RunOptions, path: str, most: int = DEFAULT_PARALLEL, *, gpu: str | None = None) -> int:
    """Slots a server opens when --parallel is left out: the most of most, most/2, ..., 1 whose
    plan (KV and draft KV for every sequence) fits this machine (or plan's --gpu `gpu`) as well
    as the plan for one does: no layer more pushed off the GPU, nothing that fitted failing to."""
    from homespec.session.load import plan_for_run

    one = plan_for_run(opt, path, gpu=gpu, parallel=1)
    n = most
    while n > 1:
        plan = plan_for_run(opt, path, gpu=gpu, parallel=n)
        if plan.verdict == one.verdict and plan.offloaded_layers <= one.offloaded_layers:
            return n
        n //= 2
    return 1


def lane_leaves(opt: RunOptions, parallel: int, n_batch: int) -> int:
    """Tree paths (llama.cpp sequence ids) each sequence gets: one for a chain, else what the
    draft tree needs within llama.cpp's 256 ids (and n_batch) shared by every sequence."""
    from homespec.backends.llamacpp.tree import MAX_SEQ, tree_leaves

    if opt.method != "eagle3" or opt.draft_topk == 1:
        return 1
    return max(1, min(tree_leaves(opt.draft_tokens), MAX_SEQ // parallel, n_batch // parallel))


def open_parts(opt: RunOptions, parallel: int, ubatch: int | None = None) -> EngineParts:
    """`ubatch`: llama.cpp micro-batch rows (None: the plan's)."""
    from homespec.backends.llamacpp.multi import MultiSeqBackend
    from homespec.backends.settings import settings_from_plan
    from homespec.session.load import plan_for_run

    if parallel < 1:
        raise UsageError(f"--parallel {parallel} is not positive", hint="pass --parallel 1 or more")
    if opt.backend != "llamacpp":
        raise UsageError(f"the batched engine runs the llamacpp backend, not {opt.backend}",
                         hint="use --backend llamacpp (a GGUF file), or serve one sequence at a time")
    if opt.method == "draft":
        raise UsageError("the batched engine drafts with eagle3, ngram or none",
                         hint="use --method eagle3 or --method ngram with --parallel")
    path = check_options(opt)
    # the plan budgets KV for `parallel` sequences of opt.ctx cells (`homespec plan --parallel`);
    # llama.cpp gets parallel x ctx cells (one stream per lane for chains, one shared buffer for
    # trees: MultiSeqBackend)
    plan = plan_for_run(opt, path, parallel=parallel)
    settings = settings_from_plan(plan, n_threads=threads_of(opt), n_ctx=parallel * plan.settings.n_ctx)
    if ubatch is not None:
        settings = replace(settings, n_ubatch=max(1, min(settings.n_ubatch, ubatch)))
    leaves = lane_leaves(opt, parallel, settings.n_batch)
    if opt.method == "eagle3" and opt.draft_topk > 1:
        opt = replace(opt, draft_tokens=min(opt.draft_tokens, leaves + 1))  # a tree of N nodes has <= N-1 leaves
    backend = MultiSeqBackend(path, settings, lanes=parallel, lane_ctx=opt.ctx, leaves_per_lane=leaves)
    try:
        drafters = lane_drafters(backend, path, opt, parallel)
    except BaseException:
        backend.close()
        raise
    first = drafters[0]
    shape = first.shape if first is not None else None
    return EngineParts(backend, drafters, make_batch_guard(first, opt), path, plan, shape)


def lane_drafters(backend: "MultiSeqBackend", path: str, opt: RunOptions, parallel: int) -> list["Drafter | None"]:
    """One drafter per sequence; EAGLE drafters share one head (its weights), each keeps its own KV."""
    from homespec.session.load import make_drafter

    first, _ = make_drafter(backend, path, opt)  # type: ignore[arg-type] - drafters read the Backend's shape only
    if first is None:
        return [None] * parallel
    out: list["Drafter | None"] = [first]
    for _ in range(1, parallel):
        if opt.method == "ngram":
            from homespec.speculative.drafters.ngram import NgramDrafter

            out.append(NgramDrafter(max_ngram=first.max_ngram, num_draft=first.num_draft))
        else:
            from homespec.speculative.drafters.eagle3 import Eagle3Drafter

            d = Eagle3Drafter(first.head, backend, depth=first.depth, topk=first.topk, total=first.total,
                              window=first.window, capacity=first.cache.capacity, source=first.source)
            d.expected_acceptance = first.expected_acceptance
            out.append(d)
    return out


def make_batch_guard(drafter: "Drafter | None", opt: RunOptions) -> "BatchGuard | None":
    """The guard over the batch (forced to full depth when the options ask for no guard)."""
    if drafter is None:
        return None
    from homespec.engine.guard import BatchGuard

    shape = drafter.shape
    return BatchGuard(depth=shape.depth, nodes_per_level=(shape.total - 1) / shape.depth,
                      prior=getattr(drafter, "expected_acceptance", None) or None, forced=not opt.guard)
