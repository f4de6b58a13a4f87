"""Engine settings that a plan decides and a backend consumes.

The planner prints a plan; the same plan starts the backend (docs/architecture.md, contract 4).
`settings_for(plan)` (homespec.backends.registry) is the narrow piece of it the plan's backend is built from: llama.cpp's
`BackendSettings`, the torch backend's `TorchSettings`, exllamav2's `Exl2Settings`. This module
imports nothing heavy: `homespec plan` uses it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from homespec.errors import UsageError
from homespec.formats.exl2 import model_spec_from_exl2_dir
from homespec.limits import CTX
from homespec.plan.devices import HOST, devices_for
from homespec.plan.lines import LineKind
from homespec.plan.place.exl2 import reserve
from homespec.plan.settings import DEFAULT_BATCH, EXL2_CACHE, KV_TYPES, v_cache_needs_flash_attn
from homespec.types import ModelSpec

if TYPE_CHECKING:
    from homespec.plan.fit import Plan


@dataclass(frozen=True, slots=True)
class BackendSettings:
    n_ctx: int
    n_gpu_layers: int = 0  # -1 = every layer on the GPU
    n_batch: int = DEFAULT_BATCH  # logical batch: most tokens per llama_decode call
    n_ubatch: int = DEFAULT_BATCH  # physical batch: the compute buffer scales with it
    type_k: str = "f16"
    type_v: str = "f16"
    flash_attn: bool | None = None  # None = let the engine decide
    n_threads: int | None = None  # None = every CPU core
    # fewer threads for a decode while that is measured to be faster (cores shared with other
    # processes: backends/llamacpp/threads.py); False: always n_threads
    adapt_threads: bool = True
    load_mtp: bool = False  # load the model's MTP layers too (a run that drafts with them: --method mtp)
    # draft tokens one verification may give back: where the model keeps a recurrent state, llama.cpp
    # keeps that many per-token snapshots of it (n_rs_seq; backends/llamacpp/rollback.py)
    rollback: int = 0

    def __post_init__(self) -> None:
        check_settings(self)


def check_settings(s: BackendSettings) -> None:
    """Reject settings no engine can run, with the fix in the hint."""
    if s.n_ctx < 1:
        raise UsageError(f"context size {s.n_ctx} is not positive", hint="pass --ctx 4096 or similar")
    if s.n_batch < 1 or s.n_ubatch < 1:
        raise UsageError(f"batch sizes must be positive (n_batch {s.n_batch}, n_ubatch {s.n_ubatch})")
    if s.n_ubatch > s.n_batch:
        raise UsageError(
            f"n_ubatch {s.n_ubatch} is larger than n_batch {s.n_batch}",
            hint="the physical batch (ubatch) is a slice of the logical batch; use n_ubatch <= n_batch",
        )
    if s.n_gpu_layers < -1:
        raise UsageError(f"n_gpu_layers {s.n_gpu_layers} is invalid", hint="use -1 for all layers, 0 for none")
    if s.n_threads is not None and s.n_threads < 1:
        raise UsageError(f"n_threads {s.n_threads} is not positive")
    if not 0 <= s.rollback <= 4096:
        raise UsageError(f"rollback {s.rollback} is outside 0..4096", hint="the most draft tokens one step verifies")
    for which, t in (("K", s.type_k), ("V", s.type_v)):
        if t not in KV_TYPES:
            raise UsageError(f"unknown {which} cache type {t!r}", hint=f"choose one of {', '.join(KV_TYPES)}")
    # flash_attn None (auto) lets llama.cpp switch it on for a quantised V cache
    if v_cache_needs_flash_attn(s.type_v) and s.flash_attn is False:
        raise UsageError(
            f"a {s.type_v} V cache needs flash attention, which is switched off",
            hint="turn flash attention on (or leave it on auto), or use --kv-type f16",
        )


def settings_from_plan(plan: Plan, *, n_threads: int | None = None, load_mtp: bool = False,
                       rollback: int | None = None) -> BackendSettings:
    """llama.cpp's settings from the plan that starts it: the plan's batch, KV types, flash attention and
    layers on the GPU, with n_ctx the KV cells of all its sequences (n_seq lanes of n_ctx tokens each:
    llama-server -np N -c N x ctx). The rest is what the run adds: its threads, whether the MTP layers
    load, and the draft tokens a recurrent state keeps snapshots for (None: the plan's)."""
    s = plan.settings
    return BackendSettings(n_ctx=s.n_ctx * s.n_seq, n_gpu_layers=s.n_gpu_layers, n_batch=s.n_batch,
                           n_ubatch=s.n_ubatch, type_k=s.type_k, type_v=s.type_v, flash_attn=s.flash_attn,
                           n_threads=n_threads, load_mtp=load_mtp,
                           rollback=s.rollback if rollback is None else rollback)


# --- the torch backend ---------------------------------------------------------------------------

# torch's device for the vendor of the GPU a plan put the model on (ROCm builds of torch call theirs cuda).
TORCH_DEVICES = {"nvidia": "cuda", "amd": "cuda", "apple": "mps"}


@dataclass(frozen=True, slots=True)
class TorchSettings:
    """What the torch backend is loaded with (TorchBackend.from_settings)."""

    device: str  # "cpu", "cuda", "cuda:N" or "mps"
    dtype: str  # "f32", "f16" or "bf16": every weight is dequantised to it, and the KV cache holds it
    max_context: int  # tokens the static KV cache holds


def torch_settings(plan: Any, *, device: str | None = None, dtype: str | None = None) -> TorchSettings:
    """The torch backend's settings from its plan: the device the plan put the weights on, the float
    type it budgeted there (fp32 on the CPU, homespec.plan.place.torch) and its context; explicit
    values win. On the CPU the backend always runs fp32."""
    s = plan.settings
    if s.backend != "torch":
        raise UsageError(f"this plan is for the {s.backend} backend, not torch", hint="plan again with --backend torch")
    where = next(i.device for i in plan.items if i.kind == LineKind.WEIGHTS)
    planned = "cpu" if where == HOST else TORCH_DEVICES.get(plan.machine.gpus[where].vendor, "cuda")
    dev = device or planned
    return TorchSettings(device=dev, dtype=dtype or ("f32" if dev == "cpu" else s.torch_dtype), max_context=s.n_ctx)


# --- exllamav2 -------------------------------------------------------------------------------------

# exllamav2's own default scratch sizing (config.max_input_len); the planner sizes the same
# (homespec.plan.memory.EXL2_MAX_INPUT_LEN).
DEFAULT_MAX_INPUT_LEN = 2048


@dataclass(frozen=True, slots=True)
class Exl2Settings:
    model_dir: str
    max_seq_len: int  # tokens the cache holds
    cache_mode: str  # "fp16" | "q8" | "q6" | "q4": ExLlamaV2Cache, _Q8, _Q6, _Q4
    max_input_len: int = DEFAULT_MAX_INPUT_LEN  # longest chunk one forward processes
    n_layer: int = 0
    hidden_size: int = 0
    quant: str = ""  # "EXL2-4.65": bits per weight measured from the files
    # Bytes load_autosplit keeps free on each GPU, as the plan budgeted them (empty: exllamav2's defaults).
    reserve_vram: tuple[int, ...] = ()


def check_exl2_dir(model_dir: str | os.PathLike) -> ModelSpec:
    """The directory's ModelSpec, or a UsageError/FormatError naming what is wrong with it."""
    path = Path(model_dir)
    if not path.exists():
        raise UsageError(f"no EXL2 model directory at '{path}'", hint="pass a directory made by exllamav2's convert_exl2")
    if not path.is_dir():
        raise UsageError(f"'{path}' is a file; the exl2 backend runs a model directory",
                         hint="use --backend llamacpp for GGUF files")
    return model_spec_from_exl2_dir(path)


def exl2_settings(
    model_dir: str | os.PathLike,
    plan: Any = None,
    *,
    max_context: int | None = None,
    kv_type: str | None = None,
    max_input_len: int | None = None,
) -> Exl2Settings:
    """Settings from a plan (its `.settings`: backend, n_ctx, type_k; a whole Plan also gives
    the reserve on each GPU), explicit values winning.

    The plan's --kv-type maps onto an exllamav2 cache class through plan.settings.EXL2_CACHE, and
    max_input_len is capped at the context as load_autosplit does (homespec.plan.memory.exl2_input_len).
    """
    spec = check_exl2_dir(model_dir)
    src = getattr(plan, "settings", plan)
    if src is not None and getattr(src, "backend", "exl2") != "exl2":
        raise UsageError(f"this plan is for the {src.backend} backend, not exl2",
                         hint="plan again with --backend exl2 (or omit --backend for an EXL2 directory)")
    ctx = max_context or getattr(src, "n_ctx", None)
    if not ctx:
        raise UsageError("no context size given for the exl2 backend", hint="pass --ctx or a plan")
    kv = (kv_type or getattr(src, "type_k", None) or "f16").lower()
    if kv not in EXL2_CACHE:
        raise UsageError(f"exllamav2 has no '{kv}' cache", hint="use --kv-type f16, q8, q6 or q4")
    CTX.check(ctx)
    return Exl2Settings(
        model_dir=str(Path(model_dir)),
        max_seq_len=int(ctx),
        cache_mode=EXL2_CACHE[kv],
        max_input_len=int(max_input_len or min(DEFAULT_MAX_INPUT_LEN, ctx)),
        n_layer=spec.n_layer,
        hidden_size=spec.n_embd,
        quant=spec.quant or "",
        reserve_vram=_planned_reserves(plan),
    )


def _planned_reserves(plan: Any) -> tuple[int, ...]:
    """What the plan keeps free on each of its GPUs: its reserve line items, and for a GPU it left
    empty what load_autosplit would keep there (homespec.plan.place.exl2.reserve)."""
    machine = getattr(plan, "machine", None)
    if machine is None:
        return ()

    planned = {i.device: i.bytes for i in plan.items if i.kind == LineKind.RESERVE}
    gpus = [d for d in devices_for(machine) if d.is_gpu]
    return tuple(planned.get(g.id, reserve(g, k)) for k, g in enumerate(gpus))


def exl2_for_plan(plan: Any, **overrides: Any) -> Exl2Settings:
    """exllamav2's settings from its plan; the model directory is `model_dir=`, else the plan's own
    EXL2 source."""
    model_dir = overrides.pop("model_dir", None) or (plan.model.source if plan.model.format == "exl2" else None)
    if model_dir is None:
        raise UsageError(f"the plan of {plan.model.name} names no EXL2 directory to load",
                         hint="pass the directory exllamav2's convert_exl2 wrote as --model")
    return exl2_settings(model_dir, plan, **overrides)
