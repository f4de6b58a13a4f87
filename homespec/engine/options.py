"""What a run is asked for (RunOptions) and every check on it that needs no model weights.

The plan that `homespec plan` prints for the same arguments is the one that starts the backend
(homespec.engine.assemble); everything here runs before anything loads.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from homespec import limits
from homespec.backends.registry import BACKENDS, backend_entry
from homespec.embedded import DEFAULT_HEAD, shipped_head
from homespec.formats.gguf import read_model_header
from homespec.formats.gguf_model import model_spec_from_gguf
from homespec.hardware.probe import probe
from homespec.limits import cap_threads, env_threads
from homespec.sources.resolve import resolve
from homespec.speculative.methods import find_method, lookup_depth, method_entry
from homespec.errors import UsageError
from homespec.plan.api import MTP_DEPTH
from homespec.plan.settings import DEFAULT_CTX, GPU_DRAFT, draft_shape as _shape

if TYPE_CHECKING:
    from homespec.sources.resolve import Resolved

__all__ = ["RunOptions", "check_options", "draft_shape", "head_dir", "auto_head", "drafts_with_head", "tree_nodes",
           "lookup_depth", "lookup_without_head", "resolve_model_path", "threads_of",
           "default_head", "draft_for_plan", "paired_head", "ModelTraits", "model_traits", "drafts_with_mtp",
           "chains_for", "rollback_for", "rollback_saves", "drafts_trees"]


@dataclass(frozen=True, slots=True)
class RunOptions:
    model: str | None = None  # a GGUF file or HF directory; None = the embedded SmolLM2
    # auto/eagle3: a head (auto or None: the one paired with the model, none, a catalogue id, a head
    # directory or an eagle3 .gguf); draft: a small GGUF/HF model
    draft: str | None = None
    method: str = "auto"  # auto: per step, prompt lookup, the suffix store or the EAGLE head (when there is one)
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
    draft_dtype: str = "q8_0"  # the EAGLE head's matrices in llama.cpp (backends/llamacpp/head_convert.py)
    # the guard (homespec.speculative.guard) over a drafter: the CLI's --guard is on by default; a library
    # caller asks for it (off: every step drafts the full shape). adapt: kept for callers that pass
    # it; the guard chooses the draft depth every step
    guard: bool = False
    adapt: bool = False


def draft_shape(backend: str, device: str | None, depth: int | None, topk: int | None,
                nodes: int | None, method: str = "auto") -> tuple[int, int, int]:
    """Fill the draft shape the user left open from what the target runs on (the planner's rule,
    homespec.plan.settings.draft_shape). The torch backend left on auto runs on a GPU when there is one.
    A model's MTP layers draft a chain of MTP_DEPTH tokens wherever they run, as the planner and
    llama-server's draft-mtp do (homespec.plan.api)."""
    if method == "mtp":
        depth = MTP_DEPTH if depth is None else depth
        topk = 1 if topk is None else topk
    on_gpu = False
    if None in (depth, topk, nodes):  # probe the machine only for what the user left open
        entry = BACKENDS.get(backend)
        on_gpu = device != "cpu" if entry is not None and entry.torch_device and device is not None else _has_gpu()
    return _shape(on_gpu, depth, topk, nodes)


def _has_gpu() -> bool:
    """A GPU llama.cpp could use: probed without importing torch or llama_cpp."""
    try:
        return bool(probe().gpus)
    except Exception:  # a broken driver is a CPU machine for this purpose
        return False


def resolve_model_path(model: str | None, role: str = "model") -> str:
    """A local file or directory for --model/--draft: a path, a store name (ollama:, lmstudio:) or a
    hub name (org/repo[:QUANT], downloaded into the hub cache; a head's repo fetched whole)."""
    return resolve(model, role, "run").path


def default_head(model_path: str) -> Path | None:
    """The shipped head when the target is the embedded model (the one its plan describes)."""
    return shipped_head(model_path)


def lookup_without_head(opt: RunOptions) -> RunOptions:
    """--method eagle3 with neither --draft nor --model in an install that ships no head: prompt
    lookup (ngram) instead, with a note, so that the run still speculates (chat and serve)."""
    method = find_method(opt.method)  # an unknown one is check_options' to refuse
    if method is None or not method.needs_head or opt.draft is not None or opt.model is not None:
        return opt
    if (DEFAULT_HEAD / "config.json").is_file():
        return opt
    import sys

    print("note: no shipped EAGLE head found; using --method ngram", file=sys.stderr)
    return replace(opt, method="ngram")


def threads_of(opt: RunOptions) -> int | None:
    """--threads, else HOMESPEC_THREADS, else None (the engine's own choice: every physical core);
    at most one per CPU this process may use (the CLI says so when it caps: homespec.cli.options)."""
    threads, source = (opt.threads, "--threads") if opt.threads is not None else (env_threads(), "HOMESPEC_THREADS")
    return None if threads is None else cap_threads(threads, source)[0]


def tree_nodes(opt: RunOptions) -> int:
    """Nodes of the largest tree one verification holds, the root included: eagle3 drafts a tree
    of --draft-tokens nodes, ngram, suffix and draft models a chain of --draft-depth tokens, auto
    either an EAGLE tree or a lookup's chain of lookup_depth tokens."""
    return method_entry(opt.method).nodes(opt)


@functools.lru_cache(maxsize=16)
def _head(draft: str | None, model_path: str) -> "Resolved":
    return resolve(draft, "head", "run", target_path=model_path)


def paired_head(opt: RunOptions, model_path: str) -> "Resolved":
    """The head --draft names for the model (auto: the one homespec pairs with it, homespec.sources.pairing),
    checked against the model before anything loads; its note (how to fetch a head that is not
    here) printed once."""
    found = _head(opt.draft, model_path)
    _say(found.note)
    return found


_SAID: set[str] = set()  # notes already printed by this process


def _say(note: str | None) -> None:
    if note and note not in _SAID:
        import sys

        _SAID.add(note)
        print(note, file=sys.stderr)


def _gguf_head_note(path: str, backend: str) -> str:
    """Why an eagle3 GGUF head is not drafted with: llama.cpp runs it beside a llama.cpp target
    (homespec/backends/llamacpp/head.py); the torch head beside the torch and EXL2 backends reads a
    head directory."""
    return (f"note: {Path(path).name} is an eagle3 GGUF head, which runs beside a llama.cpp target, not the "
            f"{backend} backend's: drafting with prompt lookups; pass the head's directory as --draft "
            "(`homespec models` lists the heads here)")


def _runs_gguf_heads(opt: RunOptions) -> bool:
    return opt.backend == "llamacpp"


def auto_head(opt: RunOptions, model_path: str) -> Path | None:
    """The EAGLE head auto drafts with beside its lookups: --draft (a head, checked against the
    model), else the one paired with the model (auto), else none (lookups alone)."""
    found = paired_head(opt, model_path)
    if found.path is not None and Path(found.path).is_file() and not _runs_gguf_heads(opt):
        _say(_gguf_head_note(found.path, opt.backend))
        return None
    return Path(found.path) if found.path is not None else None


def drafts_with_head(opt: RunOptions, model_path: str) -> bool:
    """Whether this run loads an EAGLE head (eagle3, or auto with a head and no MTP layers)."""
    method = method_entry(opt.method)
    return method.needs_head or (method.uses_head and not drafts_with_mtp(opt, model_path)
                                 and auto_head(opt, model_path) is not None)


@dataclass(frozen=True, slots=True)
class ModelTraits:
    """What a run reads off the model's header before loading it."""

    mtp: int = 0  # MTP blocks after the trunk (nextn_predict_layers)
    recurrent: bool = False  # keeps a recurrent state (a hybrid or an SSM): drafts are chains there


@functools.lru_cache(maxsize=16)
def model_traits(model_path: str) -> ModelTraits:
    """The GGUF's MTP blocks and recurrent state (nothing for a directory, the torch and EXL2 backends'
    models, nor for a catalogue name a plan resolves)."""
    if not Path(model_path).is_file():
        return ModelTraits()

    spec = model_spec_from_gguf(read_model_header(model_path))
    return ModelTraits(mtp=spec.n_nextn_layer, recurrent=bool(spec.recurrent_layers))


def drafts_with_mtp(opt: RunOptions, model_path: str) -> bool:
    """Whether this run drafts with the model's own MTP layers: --method mtp, or auto on a GGUF that has
    them when --draft names no head (auto prefers them: docs/speculative.md)."""
    if method_entry(opt.method).needs_mtp:
        return True
    unnamed = opt.draft is None or opt.draft.strip().lower() in ("auto", "mtp")
    return (opt.method == "auto" and opt.backend == "llamacpp" and unnamed
            and model_traits(model_path).mtp > 0)


def drafts_trees(opt: RunOptions, model_path: str) -> bool:
    """Whether this run's model drafter drafts trees of several leaves: an EAGLE head, or --method mtp
    asked for a top-k above 1 (auto's MTP layers draft chains: homespec.speculative.methods)."""
    return opt.draft_topk > 1 and (drafts_with_head(opt, model_path) or method_entry(opt.method).needs_mtp)


def chains_for(opt: RunOptions, model_path: str) -> RunOptions:
    """A model with a recurrent state verifies chains (backends/llamacpp/rollback.py): a tree shape
    becomes the chain of its depth, saying so once."""
    if opt.draft_topk == 1 or not method_entry(opt.method).speculative or not model_traits(model_path).recurrent:
        return opt
    _say(f"note: this model keeps a recurrent state, which verifies chains: drafting chains of "
         f"{opt.draft_depth} (--draft-topk 1)")
    return replace(opt, draft_topk=1, draft_tokens=opt.draft_depth + 1)


def rollback_for(opt: RunOptions, model_path: str) -> int:
    """Draft tokens one verification gives back at most through llama.cpp's own snapshots of a recurrent
    state (n_rs_seq; backends/llamacpp/rollback.py): the drafter's chain (auto: its model drafter's depth,
    a longer lookup chain being verified under replay); 0 where there is no recurrent state or no drafting."""
    if not method_entry(opt.method).speculative or not model_traits(model_path).recurrent:
        return 0
    return opt.draft_depth if opt.method == "auto" else tree_nodes(opt) - 1


def rollback_saves(opt: RunOptions) -> bool:
    """Whether chains longer than rollback_for's snapshots are verified too: auto's lookups, beside a model
    drafter whose depth sized them (the state is saved on the device before those: rollback.py)."""
    return opt.method == "auto"


def check_options(opt: RunOptions) -> str:
    """Every check that needs no model weights, run before anything loads. -> the model's path."""
    backend, method = backend_entry(opt.backend), method_entry(opt.method)
    for r, v in ((limits.CTX, opt.ctx), (limits.WINDOW, opt.window), (limits.DRAFT_DEPTH, opt.draft_depth),
                 (limits.DRAFT_TOPK, opt.draft_topk), (limits.DRAFT_TOKENS, opt.draft_tokens)):
        if v is not None:
            r.check(v)  # the parser's ranges (homespec.limits), for callers that build RunOptions themselves
    _check_device(opt, backend.torch_device)
    if opt.draft_dtype not in ("f16", "q8_0"):
        raise UsageError(f"--draft-dtype {opt.draft_dtype} is not f16 or q8_0",
                         hint="q8_0 (the default) or f16")
    threads_of(opt)
    _check_tree(opt)
    path = resolve_model_path(opt.model)
    models = [path]
    if method.draft_model:
        if not opt.draft or opt.draft.strip().lower() in ("auto", "none"):
            raise UsageError("--method draft needs a draft model", hint="pass --draft PATH to a small GGUF with the same tokenizer")
        models.append(resolve_model_path(opt.draft, "draft"))
    if backend.gguf_only and any(Path(m).is_dir() for m in models):
        raise UsageError("the llamacpp backend runs GGUF files", hint="use --backend torch for a Hugging Face directory")
    if backend.gguf_only:
        for m in models:  # a truncated or damaged file is named as `plan` names it, before llama.cpp reads it
            read_model_header(m)
    if method.needs_mtp:
        _check_mtp(opt, path)
    elif method.needs_head:
        head_dir(opt, path)
    elif method.uses_head and not drafts_with_mtp(opt, path):
        auto_head(opt, path)  # --draft must name a head
    return path


def _check_mtp(opt: RunOptions, path: str) -> None:
    """--method mtp: llama.cpp runs the MTP layers, which the GGUF must carry."""
    if opt.backend != "llamacpp":
        raise UsageError(f"--method mtp runs a model's MTP layers in llama.cpp, not the {opt.backend} backend",
                         hint="use --backend llamacpp with a GGUF")
    if model_traits(path).mtp == 0:
        raise UsageError(f"{Path(path).name} has no MTP layers (its header sets no nextn_predict_layers)",
                         hint="use --method auto, eagle3 or ngram; MTP ships with Qwen3.5/3.6, Qwen3-Next, GLM-4.5+, "
                              "DeepSeek-V3 GGUFs converted with their MTP layers")


def _check_device(opt: RunOptions, torch_device: bool) -> None:
    """--device: a name torch knows, for a backend that runs on a torch device, and there."""
    device = opt.device
    if device is None:
        return
    if device not in ("cpu", "mps") and not device.startswith("cuda"):
        raise UsageError(f"unknown device '{device}'", hint="use --device cpu, cuda, cuda:N or mps")
    if not torch_device:
        raise UsageError(f"--device {device} chooses where the torch backend runs; --backend {opt.backend} runs "
                         "where its build runs (llama.cpp: CUDA, Metal or the CPU)",
                         hint="drop --device, or add --backend torch")
    if device != "cpu":
        backend_entry(opt.backend).check_device(device)


def _check_tree(opt: RunOptions) -> None:
    """The context must hold the prompt and a whole draft tree; llama.cpp verifies one leaf per
    sequence, and holds at most its entry's max_seq of them."""
    nodes, trees = tree_nodes(opt), method_entry(opt.method).trees
    flag = "--draft-tokens" if trees else "--draft-depth"
    if nodes >= opt.ctx:
        raise UsageError(f"--ctx {opt.ctx} cannot hold a prompt and a draft tree of {nodes} nodes",
                         hint=f"raise --ctx (e.g. --ctx {max(256, 2 * nodes)}) or lower {flag}")
    entry = BACKENDS[opt.backend]
    if entry.seq_per_leaf and trees and opt.draft_topk > 1 and nodes - 1 > entry.max_seq:
        raise UsageError(f"--draft-tokens {nodes} allows a tree of {nodes - 1} leaves; llama.cpp verifies at most "
                         f"{entry.max_seq} (one sequence each)", hint=f"use --draft-tokens {entry.max_seq + 1} or fewer")


def head_dir(opt: RunOptions, model_path: str) -> Path:
    """The EAGLE-3 head to draft with (--method eagle3): --draft, else the one paired with the model."""
    found = _head(opt.draft, model_path)
    if found.path is not None and Path(found.path).is_file() and not _runs_gguf_heads(opt):
        raise UsageError(_gguf_head_note(found.path, opt.backend).removeprefix("note: ").split(": drafting with")[0],
                         hint="pass the head's directory as --draft, or use --method auto")
    if found.path is not None:
        return Path(found.path)
    if found.source == "none":
        raise UsageError("--method eagle3 drafts with a head and --draft none names none",
                         hint="drop --draft none, or use --method auto / ngram")
    fetch = found.note.rsplit("Fetch it with: ", 1)[-1] if found.note else None
    raise UsageError(
        "no EAGLE-3 head for this model on this machine" if fetch is None else
        f"the EAGLE-3 head for this model is not on this machine (`{fetch}` fetches it)",
        hint=f"run `{fetch}`, or use --method auto" if fetch else
        "pass --draft DIR|FILE.gguf|ID (`homespec models` lists the heads here), train one with "
        "`homespec draft train`, or use --method ngram")


def draft_for_plan(opt: RunOptions, model_path: str) -> str | None:
    """What the run's plan is made with as --draft: the draft model, the head this run drafts with
    (its path), or none. A model that is not a local file (a catalogue name, planned for plan's
    --gpu before anything loads) is planned with --draft as given: None is the catalogue's pairing."""
    method = method_entry(opt.method)
    if method.draft_model:
        return opt.draft or "none"
    if drafts_with_mtp(opt, model_path):
        return "mtp"
    if (method.needs_head or method.uses_head) and not Path(model_path).is_file():
        return opt.draft
    if method.needs_head:
        return str(head_dir(opt, model_path))
    if method.uses_head:
        head = auto_head(opt, model_path)
        return str(head) if head is not None else "none"
    return "none"
