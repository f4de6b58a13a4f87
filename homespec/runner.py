"""From command-line choices to a running target + drafter: what generate, chat and bench share.

The plan that `homespec plan` prints for the same arguments is the one that starts the backend
(context, layers on the GPU, KV type, flash attention); after loading, the backend's own memory
report is set beside the plan's figures.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

# DEFAULT_HEAD, HEADS_DIR and CPU_DRAFT are also imported from here (cli, train, tests)
from homespec.embedded import DEFAULT_HEAD, HEADS_DIR, shipped_head  # noqa: F401
from homespec.errors import UsageError
from homespec.plan.settings import CPU_DRAFT, DEFAULT_CTX, GPU_DRAFT, draft_shape as _shape  # noqa: F401

if TYPE_CHECKING:
    from homespec.backends.base import Backend
    from homespec.plan.fit import Plan
    from homespec.speculative.types import Drafter

METHODS = ("none", "ngram", "draft", "eagle3")
RUN_BACKENDS = ("torch", "llamacpp", "exl2")


@dataclass(frozen=True, slots=True)
class RunOptions:
    model: str | None = None  # a GGUF file or HF directory; None = the embedded SmolLM2
    draft: str | None = None  # head dir (eagle3) or GGUF/HF model (draft); None = the default pairing
    method: str = "eagle3"
    backend: str = "llamacpp"
    device: str | None = None  # torch backend: cpu / cuda / mps (auto)
    ctx: int = DEFAULT_CTX
    draft_depth: int = GPU_DRAFT[0]
    draft_topk: int = GPU_DRAFT[1]
    draft_tokens: int = GPU_DRAFT[2]
    threads: int | None = None
    exact: bool = False  # llama.cpp: verify with the one-token kernels (bit-exact, slower)
    # EAGLE head attends to the newest N entries only; None: the head's recorded training length
    # (full attention when it records none); 0: full attention
    window: int | None = None


@dataclass
class Session:
    """A loaded target (and drafter) ready to generate."""

    backend: "Backend"
    drafter: "Drafter | None"
    options: RunOptions
    model_path: str
    plan: "Plan | None" = None
    draft_backend: "Backend | None" = None
    owns_backend: bool = True  # False: a target shared with other sessions, closed by whoever loaded it

    def close(self) -> None:
        for b in (self.draft_backend, self.backend if self.owns_backend else None):
            if b is not None:
                b.close()

    def memory(self) -> dict[str, Any]:
        """Measured (the engine's own report) beside planned bytes, for --json and chat."""
        rep = self.backend.memory_report()
        out: dict[str, Any] = {
            "measured": {"weights_bytes": rep.weights_bytes, "kv_bytes": rep.kv_bytes,
                         "compute_bytes": rep.compute_bytes, "total_bytes": rep.total_bytes, "device": rep.device},
        }
        if self.plan is not None:
            items = self.plan.items
            out["planned"] = {
                "weights_bytes": sum(i.bytes for i in items if i.name in ("weights", "weights (CPU repack)")),
                "kv_bytes": sum(i.bytes for i in items if i.name == "target KV"),
                "compute_bytes": sum(i.bytes for i in items if i.name == "compute"),
                "total_bytes": self.plan.total_bytes,
            }
        return out


def draft_shape(backend: str, device: str | None, depth: int | None, topk: int | None,
                nodes: int | None) -> tuple[int, int, int]:
    """Fill the draft shape the user left open from what the target runs on (the planner's rule,
    homespec.plan.settings.draft_shape). The torch backend left on auto runs on a GPU when there is one."""
    on_gpu = False
    if None in (depth, topk, nodes):  # probe the machine only for what the user left open
        on_gpu = device != "cpu" if backend == "torch" and device is not None else _has_gpu()
    return _shape(on_gpu, depth, topk, nodes)


def _has_gpu() -> bool:
    """A GPU llama.cpp could use: probed without importing torch or llama_cpp."""
    from homespec.hardware.probe import probe

    try:
        return bool(probe().gpus)
    except Exception:  # a broken driver is a CPU machine for this purpose
        return False


def resolve_model_path(model: str | None) -> str:
    if model is None:
        from homespec.embedded import smollm2_path

        return str(smollm2_path())
    p = Path(model).expanduser()
    if p.exists():
        return str(p)
    if "://" in model:
        raise UsageError(f"cannot run a model from a URL: {model}", hint="download the file, then pass its path")
    raise UsageError(
        f"no model file or directory at '{model}'",
        hint="pass a local GGUF file or Hugging Face directory (catalogue names are for `homespec plan`)",
    )


def default_head(model_path: str) -> Path | None:
    """The shipped head when the target is the embedded model (the one its plan describes)."""
    return shipped_head(model_path)


def _threads(opt: RunOptions) -> int | None:
    """--threads, else HOMESPEC_THREADS, else None (the engine's own choice: every physical core)."""
    if opt.threads is not None:
        if opt.threads < 1:
            raise UsageError(f"--threads {opt.threads} is not positive",
                             hint="pass --threads 1 or more, or leave it out to use every physical core")
        return opt.threads
    env = os.environ.get("HOMESPEC_THREADS", "").strip()
    if not env:
        return None
    if not env.isdigit() or int(env) < 1:
        raise UsageError(f"HOMESPEC_THREADS={env} is not a positive number of threads",
                         hint="set HOMESPEC_THREADS=4 (say), or unset it to use every physical core")
    return int(env)


def tree_nodes(opt: RunOptions) -> int:
    """Nodes of the largest tree one verification holds, the root included: eagle3 drafts a tree
    of --draft-tokens nodes, ngram and draft models a chain of --draft-depth tokens."""
    if opt.method == "none":
        return 1
    return opt.draft_tokens if opt.method == "eagle3" else opt.draft_depth + 1


def check_options(opt: RunOptions) -> str:
    """Every check that needs no model weights, run before anything loads. -> the model's path."""
    if opt.backend not in RUN_BACKENDS:
        raise UsageError(f"unknown backend '{opt.backend}'", hint=f"choose one of: {', '.join(RUN_BACKENDS)}")
    if opt.method not in METHODS:
        raise UsageError(f"unknown method '{opt.method}'", hint=f"choose one of: {', '.join(METHODS)}")
    if opt.window is not None and opt.window < 0:
        raise UsageError(f"--window {opt.window} is negative", hint="--window N attends to the newest N entries; 0 to all")
    if opt.device is not None and opt.device not in ("cpu", "mps") and not opt.device.startswith("cuda"):
        raise UsageError(f"unknown device '{opt.device}'", hint="use --device cpu, cuda, cuda:N or mps")
    _threads(opt)
    _check_tree(opt)
    path = resolve_model_path(opt.model)
    models = [path]
    if opt.method == "draft":
        if not opt.draft:
            raise UsageError("--method draft needs a draft model", hint="pass --draft PATH to a small GGUF with the same tokenizer")
        models.append(resolve_model_path(opt.draft))
    if opt.backend == "llamacpp" and any(Path(m).is_dir() for m in models):
        raise UsageError("the llamacpp backend runs GGUF files", hint="use --backend torch for a Hugging Face directory")
    if opt.method == "eagle3":
        _head_dir(opt, path)
    return path


def _check_tree(opt: RunOptions) -> None:
    """The context must hold the prompt and a whole draft tree; llama.cpp verifies one leaf per
    sequence, and holds at most MAX_SEQ of them."""
    from homespec.backends.llamacpp.tree import MAX_SEQ
    from homespec.plan.settings import MAX_CTX

    if not 16 <= opt.ctx <= MAX_CTX:  # the planner's range, for every backend
        raise UsageError(f"--ctx {opt.ctx} is out of range", hint=f"use --ctx between 16 and {MAX_CTX}")
    nodes = tree_nodes(opt)
    flag = "--draft-tokens" if opt.method == "eagle3" else "--draft-depth"
    if nodes >= opt.ctx:
        raise UsageError(f"--ctx {opt.ctx} cannot hold a prompt and a draft tree of {nodes} nodes",
                         hint=f"raise --ctx (e.g. --ctx {max(256, 2 * nodes)}) or lower {flag}")
    if opt.backend == "llamacpp" and opt.method == "eagle3" and opt.draft_topk > 1 and nodes - 1 > MAX_SEQ:
        raise UsageError(f"--draft-tokens {nodes} allows a tree of {nodes - 1} leaves; llama.cpp verifies at most "
                         f"{MAX_SEQ} (one sequence each)", hint=f"use --draft-tokens {MAX_SEQ + 1} or fewer")


def open_backend(path: str, opt: RunOptions, plan: "Plan | None") -> "Backend":
    if opt.backend == "torch":
        import torch

        from homespec.backends.torch.backend import TorchBackend

        if _threads(opt):
            torch.set_num_threads(_threads(opt))
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

            settings = settings_from_plan(plan, n_threads=_threads(opt))
            return LlamaCppBackend.from_settings(path, settings, **kw)
        return LlamaCppBackend.load(path, n_ctx=opt.ctx, n_threads=_threads(opt), **kw)
    if opt.backend == "exl2":
        from homespec.backends.exl2.backend import Exl2Backend  # noqa: F401 - raises a clear error without CUDA

        if plan is not None:
            from homespec.backends.settings import settings_for

            return Exl2Backend.from_settings(settings_for(plan, model_dir=path))
        return Exl2Backend.load(path, max_context=opt.ctx)  # type: ignore[attr-defined]
    raise UsageError(f"unknown backend '{opt.backend}'", hint=f"choose one of: {', '.join(RUN_BACKENDS)}")


def _head_dir(opt: RunOptions, model_path: str) -> Path:
    """The EAGLE-3 head to draft with: --draft, else the shipped head of the embedded model."""
    head_dir = Path(opt.draft).expanduser() if opt.draft else default_head(model_path)
    if head_dir is None:
        raise UsageError(
            "no EAGLE-3 head for this model",
            hint="pass --draft DIR (a head in the EAGLE-3 layout), train one with `homespec draft train`, or use --method ngram",
        )
    if not head_dir.exists():
        raise UsageError(f"no draft head at '{head_dir}'", hint="pass the directory holding config.json and model.safetensors")
    return head_dir


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
    head_dir = _head_dir(opt, model_path)
    from homespec.models.eagle3 import load_head
    from homespec.speculative.drafters.eagle3 import Eagle3Drafter

    head = load_head(head_dir, backend.n_layer, backend.hidden_size, backend.n_vocab,
                     device=backend.device if backend.name == "torch" else "cpu")
    window = head.config.draft_window if opt.window is None else (opt.window or None)
    drafter = Eagle3Drafter(head, backend, depth=opt.draft_depth, topk=opt.draft_topk, total=opt.draft_tokens,
                            window=window, capacity=opt.ctx + opt.draft_tokens + 8, source=str(head_dir))
    from homespec.speculative.record import read_prior

    drafter.expected_acceptance = read_prior(head_dir, opt.draft_depth, opt.draft_topk, opt.draft_tokens)
    return drafter, None


def plan_for_run(opt: RunOptions, path: str, *, gpu: str | None = None) -> "Plan":
    """The plan a run starts its target with (backends/settings.py: settings_for): `homespec plan`
    with the same arguments (the same defaults, homespec.plan.settings) on this machine, or on
    `gpu` (plan's --gpu); the torch backend on --device cpu is planned for the CPU."""
    from homespec.plan.api import make_plan

    if gpu is None:
        gpu = "none" if opt.backend == "torch" and opt.device == "cpu" else "auto"
    draft = opt.draft if opt.method in ("eagle3", "draft") else "none"
    return make_plan(model=path, gpu=gpu, draft=draft, ctx=opt.ctx, backend=opt.backend,
                     draft_tokens=opt.draft_tokens, draft_depth=opt.draft_depth, draft_topk=opt.draft_topk)


def open_session(opt: RunOptions, *, with_plan: bool = True, target: "Backend | None" = None) -> Session:
    """Plan, load the target, then the drafter (an EAGLE drafter must exist before the prefill:
    it tells the backend which layers' features to capture). Arguments are checked first.
    `target`: a target already loaded for `opt.model` to draft on instead of loading another
    (bench shares one across methods); the session then leaves closing it to its owner."""
    path = check_options(opt)
    plan = plan_for_run(opt, path) if with_plan else None
    backend = open_backend(path, opt, plan) if target is None else target
    try:
        drafter, draft_backend = make_drafter(backend, path, opt)
    except BaseException:
        if target is None:
            backend.close()
        raise
    return Session(backend, drafter, opt, path, plan, draft_backend, owns_backend=target is None)
