"""Engine settings that a plan decides and a backend consumes.

The planner prints a plan; the same plan starts the backend (docs/architecture.md, contract 4).
`BackendSettings` is the narrow piece of it a backend needs. This module imports nothing heavy:
`homespec plan` uses it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from homespec.errors import UsageError
from homespec.plan.settings import DEFAULT_BATCH, KV_TYPES, v_cache_needs_flash_attn


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
    for which, t in (("K", s.type_k), ("V", s.type_v)):
        if t not in KV_TYPES:
            raise UsageError(f"unknown {which} cache type {t!r}", hint=f"choose one of {', '.join(KV_TYPES)}")
    # flash_attn None (auto) lets llama.cpp switch it on for a quantised V cache
    if v_cache_needs_flash_attn(s.type_v) and s.flash_attn is False:
        raise UsageError(
            f"a {s.type_v} V cache needs flash attention, which is switched off",
            hint="turn flash attention on (or leave it on auto), or use --kv-type f16",
        )


def settings_from_plan(plan: Any = None, **overrides: Any) -> BackendSettings:
    """Backend settings from a plan (anything with a `.settings` carrying BackendSettings' fields),
    or from explicit values; explicit keyword values win over the plan's.

    Fields the plan's settings lack keep BackendSettings' defaults; unknown override names are an error.
    """
    names = {f.name for f in fields(BackendSettings)}
    unknown = set(overrides) - names
    if unknown:
        raise UsageError(f"unknown backend setting(s): {', '.join(sorted(unknown))}", hint=f"known: {', '.join(sorted(names))}")
    values: dict[str, Any] = {}
    if plan is not None:
        src = getattr(plan, "settings", plan)
        if isinstance(src, BackendSettings):
            values = {n: getattr(src, n) for n in names}
        elif isinstance(src, dict):
            values = {n: src[n] for n in names if n in src}
        else:
            values = {n: getattr(src, n) for n in names if hasattr(src, n)}
    values.update({k: v for k, v in overrides.items() if v is not None})  # None = "not given"
    if "n_ctx" not in values:
        raise UsageError("no context size given", hint="pass a plan or n_ctx=...")
    return BackendSettings(**values)

