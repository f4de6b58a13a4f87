"""What a plan decides and a backend is started with: one frozen value, shared by both."""

from __future__ import annotations

from dataclasses import dataclass, replace

from homespec.errors import UsageError

BACKENDS = ("llamacpp", "exl2", "torch")
# KV element types llama.cpp accepts for --cache-type-k/v that the planner sizes.
KV_TYPES = ("f16", "bf16", "f32", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl")
# exllamav2 cache classes: ExLlamaV2Cache, _Q8, _Q6, _Q4 (the --kv-type names map onto them).
EXL2_CACHE = {"f16": "fp16", "fp16": "fp16", "q8_0": "q8", "q8": "q8", "q6": "q6", "q4_0": "q4", "q4": "q4"}

MAX_CTX = 1 << 24  # 16M tokens: beyond any model's trained context; larger is a typo


@dataclass(frozen=True, slots=True)
class Settings:
    backend: str = "llamacpp"
    n_ctx: int = 4096
    type_k: str = "f16"
    type_v: str = "f16"
    flash_attn: bool = True
    n_ubatch: int = 512
    n_batch: int = 2048
    # Speculation: the draft tree verified per step (nodes incl. the root) and its shape.
    tree_tokens: int = 60
    draft_depth: int = 7
    draft_topk: int = 10
    # Placement, filled in by the solver: layers on GPUs (n_layer + 1 also puts the output
    # layer there, as llama.cpp's -ngl does), and how many of those each GPU holds.
    n_gpu_layers: int = 0
    layer_split: tuple[int, ...] = ()
    torch_dtype: str = "f16"  # torch backend on a GPU; on the CPU it runs fp32
    memory_scale: float = 1.0  # from --calibrate: measured / planned bytes on this machine

    def with_(self, **changes) -> "Settings":
        return replace(self, **changes)


def check_settings(s: Settings) -> None:
    """Reject absurd input with a one-line error before any arithmetic."""
    if s.backend not in BACKENDS:
        raise UsageError(f"unknown backend '{s.backend}'", hint=f"choose one of: {', '.join(BACKENDS)}")
    if s.n_ctx < 16 or s.n_ctx > MAX_CTX:
        raise UsageError(f"context {s.n_ctx} is out of range", hint=f"use --ctx between 16 and {MAX_CTX}")
    if s.n_ubatch < 1 or s.n_ubatch > 65536:
        raise UsageError(f"ubatch {s.n_ubatch} is out of range", hint="use --ubatch between 1 and 65536 (default 512)")
    if s.tree_tokens < 1 or s.tree_tokens > 4096:
        raise UsageError(f"draft tree of {s.tree_tokens} nodes is out of range", hint="use --draft-tokens between 1 and 4096")
    for name, t in (("--kv-type", s.type_k), ("--kv-type", s.type_v)):
        allowed = tuple(EXL2_CACHE) if s.backend == "exl2" else KV_TYPES
        if t not in allowed:
            raise UsageError(f"unknown KV type '{t}' for the {s.backend} backend", hint=f"{name} takes: {', '.join(allowed)}")
    if s.backend == "llamacpp" and s.type_v not in ("f16", "bf16", "f32") and not s.flash_attn:
        raise UsageError(
            f"a {s.type_v} V cache needs flash attention in llama.cpp",
            hint="add --flash-attn or use --kv-type f16",
        )
