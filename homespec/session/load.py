"""Loading what a run needs: the target backend (started from the plan `homespec plan` prints),
the drafter, and the guard over it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from homespec.errors import UsageError
from homespec.session.options import METHODS, RUN_BACKENDS, RunOptions, head_dir, resolve_model_path, threads_of, tree_nodes

if TYPE_CHECKING:
    from homespec.backends.base import Backend
    from homespec.plan.fit import Plan
    from homespec.speculative.guard import Guard
    from homespec.speculative.drafters.base import Drafter


def open_backend(path: str, opt: RunOptions, plan: "Plan | None") -> "Backend":
    if opt.backend == "torch":
        import torch

        from homespec.backends.torch.backend import TorchBackend

        if threads_of(opt):
            torch.set_num_threads(threads_of(opt))
        if plan is not None:
            from homespec.backends.settings import settings_for

            return TorchBackend.from_settings(path, settings_for(plan, device=opt.device))
        return TorchBackend.load(path, device=opt.device, max_context=opt.ctx)
    if opt.backend == "llamacpp":
        if Path(path).is_dir():
            raise UsageError("the llamacpp backend runs GGUF files", hint="use --backend torch for a Hugging Face directory")
        from homespec.backends.llamacpp.backend import LlamaCppBackend

        from homespec.backends.llamacpp.tree import DEFAULT_MAX_LEAVES, tree_leaves

        kw: dict[str, Any] = {"verify_mode": "exact" if opt.exact else "batch",
                              "max_leaves": max(DEFAULT_MAX_LEAVES, tree_leaves(tree_nodes(opt)))}
        if plan is not None:
            from homespec.backends.settings import settings_from_plan

            settings = settings_from_plan(plan, n_threads=threads_of(opt))
            return LlamaCppBackend.from_settings(path, settings, **kw)
        return LlamaCppBackend.load(path, n_ctx=opt.ctx, n_threads=threads_of(opt), **kw)
    if opt.backend == "exl2":
        from homespec.backends.exl2.backend import Exl2Backend  # noqa: F401 - raises a clear error without CUDA

        if plan is not None:
            from homespec.backends.settings import settings_for

            return Exl2Backend.from_settings(settings_for(plan, model_dir=path))
        return Exl2Backend.load(path, max_context=opt.ctx)  # type: ignore[attr-defined]
    raise UsageError(f"unknown backend '{opt.backend}'", hint=f"choose one of: {', '.join(RUN_BACKENDS)}")


def make_drafter(backend: "Backend", model_path: str, opt: RunOptions) -> tuple["Drafter | None", "Backend | None"]:
    if opt.method not in METHODS:
        raise UsageError(f"unknown method '{opt.method}'", hint=f"choose one of: {', '.join(METHODS)}")
    if opt.method == "none":
        return None, None
    if opt.method == "ngram":
        from homespec.speculative.drafters.ngram import NgramDrafter

        return NgramDrafter(max_ngram=3, num_draft=max(1, opt.draft_depth)), None
    if opt.method == "draft":
        if not opt.draft:
            raise UsageError("--method draft needs a draft model", hint="pass --draft PATH to a small GGUF with the same tokenizer")
        from homespec.speculative.drafters.draft_model import DraftModelDrafter

        draft_backend = open_backend(resolve_model_path(opt.draft), replace(opt, exact=False), None)
        if draft_backend.n_vocab != backend.n_vocab:
            draft_backend.close()
            raise UsageError(
                f"the draft model has {draft_backend.n_vocab} tokens, the target {backend.n_vocab}",
                hint="a draft model must share the target's tokenizer",
            )
        return DraftModelDrafter(draft_backend, depth=opt.draft_depth), draft_backend
    # eagle3
    where = head_dir(opt, model_path)
    from homespec.models.eagle3 import load_head
    from homespec.speculative.drafters.eagle3 import Eagle3Drafter

    head = load_head(where, backend.n_layer, backend.hidden_size, backend.n_vocab,
                     device=backend.device if backend.name == "torch" else "cpu")
    window = head.config.draft_window if opt.window is None else (opt.window or None)
    drafter = Eagle3Drafter(head, backend, depth=opt.draft_depth, topk=opt.draft_topk, total=opt.draft_tokens,
                            window=window, capacity=opt.ctx + opt.draft_tokens + 8, source=str(where))
    from homespec.speculative.record import read_prior

    drafter.expected_acceptance = read_prior(where, opt.draft_depth, opt.draft_topk, opt.draft_tokens)
    return drafter, None


def plan_for_run(opt: RunOptions, path: str, *, gpu: str | None = None, parallel: int = 1) -> "Plan":
    """The plan a run starts its target with (backends/settings.py: settings_for): `homespec plan`
    with the same arguments (the same defaults, homespec.plan.settings) on this machine, or on
    `gpu` (plan's --gpu); the torch backend on --device cpu is planned for the CPU. `parallel`:
    sequences served at once, each with opt.ctx cells of KV (plan's --parallel)."""
    from homespec.plan.api import make_plan

    if gpu is None:
        gpu = "none" if opt.backend == "torch" and opt.device == "cpu" else "auto"
    draft = opt.draft if opt.method in ("eagle3", "draft") else "none"
    return make_plan(model=path, gpu=gpu, draft=draft, ctx=opt.ctx, backend=opt.backend,
                     draft_tokens=opt.draft_tokens, draft_depth=opt.draft_depth, draft_topk=opt.draft_topk,
                     parallel=parallel)


def guard_prior(drafter: "Drafter | None", opt: RunOptions) -> Any:
    """The drafter's recorded acceptance when a guard will be made over it (None otherwise): the
    guard then times this machine's steps first, to predict whether speculation can pay."""
    if not opt.guard or drafter is None:
        return None
    return getattr(drafter, "expected_acceptance", None) or None


def make_guard(backend: "Backend", drafter: "Drafter | None", opt: RunOptions) -> "Guard | None":
    """The guard over the drafter (None: --no-guard, or nothing to guard). A drafter with a
    recorded acceptance lets the guard predict whether speculation can pay on this machine, from
    step costs measured here once (homespec.speculative.costs): that takes a few seconds."""
    if not opt.guard or drafter is None:
        return None
    from homespec.speculative.guard import Guard

    prior = guard_prior(drafter, opt)
    costs = None
    if prior:
        from homespec.speculative.costs import measure_costs

        costs = measure_costs(backend, drafter)
    return Guard(drafter=drafter, adapt=opt.adapt, costs=costs, prior=prior)
