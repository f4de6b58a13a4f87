"""Every backend homespec runs a target on, one entry each: `BACKENDS[name]`.

An entry says how to load one sequence of the target (from its plan, or from the options alone),
which settings the plan's backend is built from (`settings_for(plan)`: docs/architecture.md,
contract 4), where the planner puts the model (homespec.plan.place) and what the backend can do.
Adding a backend is one package under homespec/backends/ and one entry here. The loaders import
their engine (torch, llama_cpp, exllamav2) only when called: `homespec plan` reads this table
without them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from homespec.backends.llamacpp.backend import LlamaCppBackend
from homespec.backends.llamacpp.drafters import open_head, open_mtp
from homespec.backends.llamacpp.multi import MultiSeqBackend
from homespec.backends.llamacpp.tree import DEFAULT_MAX_LEAVES, MAX_SEQ as LLAMA_MAX_SEQ, tree_leaves
from homespec.backends.settings import BackendSettings, exl2_for_plan, settings_from_plan, torch_settings
from homespec.errors import UsageError
from homespec.plan.place import PLACERS, Placer

if TYPE_CHECKING:
    from homespec.contracts.backend import Backend


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadArgs:
    """What a backend is loaded with beside its path and plan."""

    ctx: int  # tokens of context when there is no plan
    threads: int | None = None  # None: the engine's own choice
    device: str | None = None  # the torch backend's device (None: auto)
    exact: bool = False  # llama.cpp: verify with the one-token kernels
    tree_nodes: int = 1  # the largest draft tree one verification holds, the root included
    chains: bool = False  # the drafts are chains (a recurrent target): one sequence id is enough
    load_mtp: bool = False  # llama.cpp: load the model's MTP layers too (--method mtp)
    rollback: int = 0  # llama.cpp: the most draft tokens one verification gives back (backends/llamacpp/rollback.py)


@dataclass(frozen=True, slots=True, kw_only=True)
class BackendEntry:
    name: str
    load: Callable[[str, Any, LoadArgs], "Backend"]  # (path, plan or None, args) -> one sequence
    settings: Callable[..., Any]  # (plan, **overrides) -> what the backend is built from
    placer: Placer  # where the planner puts the model on this backend, and its line items
    lanes: bool = False  # decodes several sequences in one context (serve's --parallel > 1)
    gguf_only: bool = False  # reads GGUF files only: a directory is refused before anything loads
    torch_device: bool = False  # runs on a torch device: --device applies, a head drafts beside it
    seq_per_leaf: bool = False  # verifies each leaf of a draft tree as a sequence of its own (at most max_seq)
    max_seq: int = 0  # seq_per_leaf: the sequence ids one context holds, every lane's leaves together
    check_device: Callable[[str], None] = lambda device: None  # a torch device is one torch sees (torch_device)
    # lanes: (path, settings, lanes, lane_ctx, leaves_per_lane) -> several sequences in one context
    open_lanes: Callable[..., Any] | None = None
    # a draft network beside the target, in the target's own engine (None: the torch EAGLE head drafts):
    # (target, head path, opt) -> the head's network, layers and window (llamacpp.drafters.OpenedHead);
    # (target, opt) -> the network of the target's MTP layers. The engine wraps them in speculative's drafters
    open_head: Callable[[Any, Path, Any], Any] | None = None
    open_mtp: Callable[[Any, Any], Any] | None = None


def _load_torch(path: str, plan: Any, a: LoadArgs) -> "Backend":
    from homespec.backends.torch.backend import TorchBackend, use_threads  # torch side: loaded for a torch target only

    use_threads(a.threads)
    if plan is not None:
        return TorchBackend.from_settings(path, torch_settings(plan, device=a.device))
    return TorchBackend.load(path, device=a.device, max_context=a.ctx)


def _torch_device(device: str) -> None:
    from homespec.backends.torch.devices import check_device  # torch side: loaded for a torch target only

    check_device(device)


def _load_llamacpp(path: str, plan: Any, a: LoadArgs) -> "Backend":
    if Path(path).is_dir():
        raise UsageError("the llamacpp backend runs GGUF files", hint="use --backend torch for a Hugging Face directory")

    kw: dict[str, Any] = {"verify_mode": "exact" if a.exact else "batch",
                          "max_leaves": 1 if a.chains else max(DEFAULT_MAX_LEAVES, tree_leaves(a.tree_nodes))}
    extra = {"load_mtp": a.load_mtp, "rollback": a.rollback}
    if plan is not None:
        return LlamaCppBackend(path, settings_from_plan(plan, n_threads=a.threads, **extra), **kw)
    return LlamaCppBackend(path, BackendSettings(n_ctx=a.ctx, n_threads=a.threads, **extra), **kw)


def _load_exl2(path: str, plan: Any, a: LoadArgs) -> "Backend":
    from homespec.backends.exl2.backend import Exl2Backend  # torch side (EXL2); a clear error without CUDA

    if plan is not None:
        return Exl2Backend.from_settings(exl2_for_plan(plan, model_dir=path))
    return Exl2Backend.load(path, max_context=a.ctx)  # type: ignore[return-value]


def _llamacpp_lanes(path: str, settings: Any, lanes: int, lane_ctx: int, leaves_per_lane: int) -> "Backend":
    return MultiSeqBackend(path, settings, lanes=lanes, lane_ctx=lane_ctx, leaves_per_lane=leaves_per_lane)


def _llamacpp_head(target: Any, where: Path, opt: Any) -> Any:
    return open_head(target, where, opt)


def _llamacpp_mtp(target: Any, opt: Any) -> Any:
    return open_mtp(target, opt)


BACKENDS: dict[str, BackendEntry] = {
    "torch": BackendEntry(name="torch", load=_load_torch, settings=torch_settings, placer=PLACERS["torch"],
                          torch_device=True, check_device=_torch_device),
    "llamacpp": BackendEntry(name="llamacpp", load=_load_llamacpp, settings=settings_from_plan,
                             placer=PLACERS["llamacpp"], lanes=True, gguf_only=True,
                             seq_per_leaf=True, max_seq=LLAMA_MAX_SEQ, open_lanes=_llamacpp_lanes,
                             open_head=_llamacpp_head, open_mtp=_llamacpp_mtp),
    "exl2": BackendEntry(name="exl2", load=_load_exl2, settings=exl2_for_plan, placer=PLACERS["exl2"]),
}


def backend_entry(name: str) -> BackendEntry:
    """The entry of --backend `name`, or a usage error naming the choices."""
    entry = BACKENDS.get(name)
    if entry is None:
        raise UsageError(f"unknown backend '{name}'", hint=f"choose one of: {', '.join(BACKENDS)}")
    return entry


def settings_for(plan: Any, **overrides: Any) -> Any:
    """The settings the plan's backend is built from (plan.settings.backend picks which); explicit
    keyword values win. The exl2 backend also needs the model directory: `model_dir=`."""
    return BACKENDS[plan.settings.backend].settings(plan, **overrides)
