"""What a plan decides and a backend is started with: one frozen value, shared by both."""

from __future__ import annotations

from dataclasses import dataclass, replace

from homespec.errors import UsageError
from homespec.limits import CTX, MAX_CTX  # noqa: F401 - MAX_CTX re-exported: --ctx's bound, 16M tokens

MAX_SEQ = 256  # sequences served at once (--parallel): llama.cpp's LLAMA_MAX_SEQ (homespec.limits.PARALLEL)

BACKENDS = ("llamacpp", "exl2", "torch")
# KV cache element types llama.cpp accepts for --cache-type-k/-v (llama.cpp common/arg.cpp), all of
# which the planner sizes; the one list for the planner and the llama.cpp backend.
KV_TYPES = ("f16", "bf16", "f32", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl")
FLOAT_KV_TYPES = frozenset({"f16", "bf16", "f32"})
QUANTISED_KV_TYPES = frozenset(KV_TYPES) - FLOAT_KV_TYPES
# exllamav2 cache classes: ExLlamaV2Cache, _Q8, _Q6, _Q4 (the --kv-type names map onto them).
EXL2_CACHE = {"f16": "fp16", "fp16": "fp16", "q8_0": "q8", "q8": "q8", "q6": "q6", "q4_0": "q4", "q4": "q4"}


# The defaults of `homespec plan` and of a run (generate, chat, bench): one copy, so the default plan
# is the plan of the default run.
DEFAULT_CTX = 4096
# Draft shapes (depth, top-k, nodes incl. the root). Where verification is compute-bound (a CPU: each
# extra node costs nearly a whole forward, docs/backends.md) a short chain pays best; where it is
# memory-bound (a GPU) a wide tree.
CPU_DRAFT = (4, 1, 5)
GPU_DRAFT = (6, 8, 48)
# llama.cpp's default logical and physical batch (llama.cpp common/common.h: n_batch = n_ubatch = 512).
DEFAULT_BATCH = 512


def v_cache_needs_flash_attn(type_v: str) -> bool:
    """llama.cpp reads a quantised V cache only inside its flash-attention kernel
    (llama_init_from_model refuses the combination otherwise)."""
    return type_v in QUANTISED_KV_TYPES


def draft_shape(on_gpu: bool, depth: int | None = None, topk: int | None = None,
                nodes: int | None = None) -> tuple[int, int, int]:
    """The draft shape (depth, top-k, nodes): what the user left open follows the hardware the target
    runs on; a chain (top-k 1) left without a node count gets depth + 1 nodes."""
    d, k, n = GPU_DRAFT if on_gpu else CPU_DRAFT
    if None not in (depth, topk, nodes):
        d, k, n = depth, topk, nodes
    depth = depth if depth is not None else d
    topk = topk if topk is not None else k
    if nodes is None:
        nodes = depth + 1 if topk == 1 else n
    if depth < 1 or topk < 1 or nodes < 1:
        raise UsageError("--draft-depth, --draft-topk and --draft-tokens must be positive",
                         hint="e.g. --draft-depth 4 --draft-topk 1")
    return depth, topk, nodes


@dataclass(frozen=True, slots=True)
class Settings:
    backend: str = "llamacpp"
    n_ctx: int = DEFAULT_CTX
    type_k: str = "f16"
    type_v: str = "f16"
    flash_attn: bool = True
    n_ubatch: int = DEFAULT_BATCH
    # Logical batch (the most tokens per decode call): what a run starts llama.cpp with,
    # max(512, n_ubatch) (homespec.engine.assemble); the buffers scale with n_ubatch only.
    n_batch: int = DEFAULT_BATCH
    # Speculation: the draft tree verified per step (nodes incl. the root) and its shape.
    tree_tokens: int = GPU_DRAFT[2]
    draft_depth: int = GPU_DRAFT[0]
    draft_topk: int = GPU_DRAFT[1]
    draft_dtype: str = "q8_0"  # an EAGLE head in llama.cpp: its matrices (backends/llamacpp/head_convert.py)
    # Placement, filled in by the solver: layers on GPUs (n_layer + 1 also puts the output
    # layer there, as llama.cpp's -ngl does), and how many of those each GPU holds.
    n_gpu_layers: int = 0
    layer_split: tuple[int, ...] = ()
    torch_dtype: str = "f16"  # torch backend on a GPU; on the CPU it runs fp32
    memory_scale: float = 1.0  # from --calibrate: measured / planned bytes on this machine
    speed_scale: float = 1.0  # from --calibrate: measured / estimated plain tokens/s on this machine
    # Sequences served at once, each with its own n_ctx cells (llama-server -np N with -c n_ctx x N).
    n_seq: int = 1
    # Sliding-window layers keep the whole context (llama.cpp --swa-full) instead of the window.
    swa_full: bool = False
    # homespec serve --cache-ram: host RAM kept for idle conversations' states (bytes; 0 = none)
    cache_ram_bytes: int = 0
    # Draft tokens one verification may give back on a model with a recurrent state: llama.cpp keeps that
    # many snapshots of it (n_rs_seq; homespec.plan.memory.rollback_copies). 0: no drafting on one.
    rollback: int = 0
    # Chains longer than those snapshots are verified too (auto: lookups' chains beside its model drafter's):
    # the state is then saved on the device before each (one more copy a sequence). Replay always saves.
    rollback_saves: bool = True
    # MoE: the first n_cpu_moe layers keep their routed experts in RAM (llama.cpp --n-cpu-moe N);
    # None = the solver chooses, and the solved settings carry its choice.
    n_cpu_moe: int | None = None
    # How llama.cpp loads weights in RAM (homespec.plan.cpu_buffers): "repack" (its extra buffer types
    # without AMX kernels), "amx" (a build with them, on a CPU with AMX), "none" (use_extra_bufts off).
    cpu_buffers: str = "repack"

    def with_(self, **changes) -> "Settings":
        return replace(self, **changes)


def check_settings(s: Settings) -> None:
    """Reject absurd input with a one-line error before any arithmetic."""
    if s.backend not in BACKENDS:
        raise UsageError(f"unknown backend '{s.backend}'", hint=f"choose one of: {', '.join(BACKENDS)}")
    CTX.check(s.n_ctx)  # tokens per sequence: the one range of --ctx (homespec.limits)
    if s.n_ubatch < 1 or s.n_ubatch > 65536:
        raise UsageError(f"ubatch {s.n_ubatch} is out of range", hint="use --ubatch between 1 and 65536 (default 512)")
    if s.n_seq < 1 or s.n_seq > MAX_SEQ:
        raise UsageError(f"--parallel {s.n_seq} is out of range", hint=f"use --parallel between 1 and {MAX_SEQ}")
    if s.n_cpu_moe is not None and s.n_cpu_moe < 0:
        raise UsageError(f"--n-cpu-moe {s.n_cpu_moe} is negative", hint="use --n-cpu-moe 0 (all experts on the GPU) or more")
    if s.tree_tokens < 1 or s.tree_tokens > 4096:
        raise UsageError(f"draft tree of {s.tree_tokens} nodes is out of range", hint="use --draft-tokens between 1 and 4096")
    for name, t in (("--kv-type", s.type_k), ("--kv-type", s.type_v)):
        allowed = tuple(EXL2_CACHE) if s.backend == "exl2" else KV_TYPES
        if t not in allowed:
            raise UsageError(f"unknown KV type '{t}' for the {s.backend} backend", hint=f"{name} takes: {', '.join(allowed)}")
    if s.backend == "llamacpp" and v_cache_needs_flash_attn(s.type_v) and not s.flash_attn:
        raise UsageError(
            f"a {s.type_v} V cache needs flash attention in llama.cpp",
            hint="add --flash-attn or use --kv-type f16",
        )
