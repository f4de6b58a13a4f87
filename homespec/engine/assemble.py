"""What an engine is opened with, assembled once for every command: `prepare(setup) -> RunParts`.

    1-2. the options checked and the plan made, once (homespec.engine.setup.set_up -> RunSetup):
       the plan's settings start the target;
    3. load the target as lanes: several sequences in one llama.cpp context
       (backends/llamacpp/multi.py) when more than one is asked for, else one sequence of any
       backend behind the one-lane adapter (homespec.engine.lanes);
    4. a drafter per lane (EAGLE drafters share one head's weights, each keeps its own KV; the
       suffix drafters share one store of the lanes' answers) and the guard over them
       (homespec.speculative.guard).

chat, generate, bench (one lane) and serve (N lanes) all start here.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from homespec.backends.registry import LoadArgs, backend_entry
from homespec.backends.settings import settings_from_plan
from homespec.engine.lanes import OneLane
from homespec.speculative.choice import CopyStats, read_copy_prior
from homespec.speculative.drafters.suffix import SuffixStore
from homespec.speculative.guard import BatchGuard
from homespec.speculative.methods import DraftInputs, clone_drafter, method_entry
from homespec.engine.options import (
    RunOptions, auto_head, drafts_trees, drafts_with_mtp, head_dir, model_traits, resolve_model_path, rollback_for,
    threads_of, tree_nodes,
)
from homespec.engine.setup import RunSetup
from homespec.errors import UsageError

if TYPE_CHECKING:
    from homespec.contracts.backend import Backend, Lanes
    from homespec.contracts.drafter import Drafter, DraftShape
    from homespec.speculative.guard import BatchGuard
    from homespec.plan.fit import Plan
    from homespec.speculative.drafters.suffix import SuffixStore

# Micro-batch rows below which a sequence's numbers do not depend on what shares its pass: under
# 64 query rows llama.cpp's CPU flash attention treats each row on its own (docs/backends.md,
# "the 64-row limit"). `ubatch=BATCH_INVARIANT_UBATCH` buys bit-identical answers at a prefill
# ~3.5x slower on this CPU (docs/server.md, "Engine"); the default keeps the plan's 512.
BATCH_INVARIANT_UBATCH = 32


@dataclass
class RunParts:
    target: "Lanes"
    drafters: list["Drafter | None"]  # one per lane
    guard: "BatchGuard | None"  # None: no drafter
    model_path: str
    plan: "Plan | None"
    shape: "DraftShape | None"  # the drafters' shape as loaded
    options: RunOptions
    backend: "Backend | None" = None  # the one-lane target's backend (None: several lanes)
    owned: list[Any] = field(default_factory=list)  # what close() frees: the target, draft models
    text: bool = True  # False: token ids only, no detokenizer (homespec.engine.run.decode)
    stop_at_eos: bool = True

    def close(self) -> None:
        for thing in reversed(self.owned):
            thing.close()
        self.owned.clear()


def prepare(setup: RunSetup, *, ubatch: int | None = None, target: "Backend | None" = None) -> RunParts:
    """Load what `setup` (homespec.engine.setup: checked and planned once) describes. `target`: a
    loaded one-sequence backend to draft on (its owner closes it; bench shares one target between
    methods)."""
    if setup.parallel > 1:
        return _several(setup, ubatch)
    return _one(setup, target)


def _one(setup: RunSetup, target: "Backend | None") -> RunParts:
    opt, path = setup.options, setup.model_path
    backend = open_backend(path, opt, setup.plan) if target is None else target
    owned: list[Any] = [backend] if target is None else []
    try:
        drafter, draft_backend = make_drafter(backend, path, opt)
    except BaseException:
        for b in owned:
            b.close()
        raise
    if draft_backend is not None:
        owned.append(draft_backend)
    if drafter is not None and not rolls_back(backend):
        drafter = None  # (a backend without a way to give drafts back)
    shape = drafter.shape if drafter is not None else None
    return RunParts(OneLane(backend), [drafter], make_guard(drafter, opt), path, setup.plan, shape, opt,
                    backend=backend, owned=owned)


def rolls_back(target: Any) -> bool:
    """Whether the target can drop rejected draft tokens. A recurrent state (hybrid models) takes in
    every verified token; llama.cpp's backends give them back (backends/llamacpp/rollback.py), a backend
    without such a way decodes without a drafter, and says so."""
    if not getattr(target, "recurrent", False) or getattr(target, "rollback_mode", None) is not None:
        return True
    import sys

    print("note: this model's recurrent state cannot drop rejected draft tokens: decoding without a drafter",
          file=sys.stderr)
    return False


def _several(setup: RunSetup, ubatch: int | None) -> RunParts:
    opt, path, parallel, plan = setup.options, setup.model_path, setup.parallel, setup.plan
    assert plan is not None  # set_up plans every run of several lanes
    # llama.cpp gets parallel x ctx cells (one stream per lane for chains, one shared buffer for
    # trees: MultiSeqBackend); the plan budgeted exactly that KV (plan --parallel)
    settings = settings_from_plan(plan, n_threads=threads_of(opt), load_mtp=drafts_with_mtp(opt, path),
                                  rollback=rollback_for(opt, path))
    if ubatch is not None:
        settings = replace(settings, n_ubatch=max(1, min(settings.n_ubatch, ubatch)))
    trees = drafts_trees(opt, path)
    leaves = lane_leaves(opt, parallel, settings.n_batch, trees=trees)
    if trees:
        opt = replace(opt, draft_tokens=min(opt.draft_tokens, leaves + 1))  # a tree of N nodes has <= N-1 leaves
    target = backend_entry(opt.backend).open_lanes(path, settings, parallel, setup.lane_ctx, leaves)
    try:
        drafters = lane_drafters(target, path, opt, parallel) if rolls_back(target) else [None] * parallel
    except BaseException:
        target.close()
        raise
    first = drafters[0]
    shape = first.shape if first is not None else None
    return RunParts(target, drafters, make_guard(first, opt), path, plan, shape, opt, owned=[target])


# --- the target and its drafters ----------------------------------------------------------------


def open_backend(path: str, opt: RunOptions, plan: "Plan | None") -> "Backend":
    """One sequence of the target, started from `plan` (None: from the options alone)."""
    args = LoadArgs(ctx=opt.ctx, threads=threads_of(opt), device=opt.device, exact=opt.exact,
                    tree_nodes=tree_nodes(opt), chains=model_traits(path).recurrent,
                    load_mtp=drafts_with_mtp(opt, path), rollback=rollback_for(opt, path))
    return backend_entry(opt.backend).load(path, plan, args)


def make_drafter(backend: "Any", model_path: str, opt: RunOptions, *,
                 store: "SuffixStore | None" = None) -> tuple["Drafter | None", "Backend | None"]:
    """The drafter `opt.method` names (homespec.speculative.methods), drafting on `backend` (and the
    draft model it loaded). `store`: the suffix store the engine's lanes share (None: one of its own)."""
    method = method_entry(opt.method)
    if not method.speculative:
        return None, None
    head, mtp = None, drafts_with_mtp(opt, model_path)
    if method.needs_head:
        head = head_dir(opt, model_path)
    elif method.uses_head and not mtp:
        head = auto_head(opt, model_path)
    draft_backend = _draft_model(opt) if method.draft_model else None
    drafter = method.make(DraftInputs(backend, opt, head=head, store=store, draft_model=draft_backend, mtp=mtp))
    return drafter, draft_backend


def _draft_model(opt: RunOptions) -> "Backend":
    """--method draft's small model, loaded as the target's backend loads (one-token kernels off)."""
    if not opt.draft:
        raise UsageError("--method draft needs a draft model", hint="pass --draft PATH to a small GGUF with the same tokenizer")
    return open_backend(resolve_model_path(opt.draft, "draft"), replace(opt, exact=False), None)


def lane_leaves(opt: RunOptions, parallel: int, n_batch: int, *, trees: bool) -> int:
    """Tree paths (llama.cpp sequence ids) each lane gets: one for a chain, else (`trees`: an EAGLE
    head drafting trees) what the draft tree needs within llama.cpp's 256 ids (and n_batch) shared
    by every lane."""
    if not trees:
        return 1
    max_seq = backend_entry(opt.backend).max_seq
    leaves = min(max_seq, max(1, opt.draft_tokens - 1))  # every node but the root a leaf
    return max(1, min(leaves, max_seq // parallel, n_batch // parallel))


def lane_drafters(target: "Lanes", path: str, opt: RunOptions, parallel: int) -> list["Drafter | None"]:
    """One drafter per lane (the first made, the others cloned: homespec.speculative.methods); EAGLE
    drafters share one head (its weights), each keeps its own KV; suffix drafters share one store of
    every lane's answers."""
    store = SuffixStore()
    first, _ = make_drafter(target, path, opt, store=store)
    if first is None:
        return [None] * parallel
    return [first] + [clone_drafter(first, target, store) for _ in range(1, parallel)]


def make_guard(drafter: "Drafter | None", opt: RunOptions) -> "BatchGuard | None":
    """The guard over the drafters (with --no-guard: forced to full depth every step)."""
    if drafter is None:
        return None

    shape = drafter.shape
    return BatchGuard(depth=shape.depth, nodes_per_level=(shape.total - 1) / shape.depth,
                      prior=getattr(drafter, "expected_acceptance", None) or None, forced=not opt.guard,
                      copies=CopyStats(prior=read_copy_prior()))
