"""vLLM's KV cache for a plan: how many tokens, and how many sequences of --ctx, fit after the weights.

vLLM takes `gpu_memory_utilization` of each GPU's memory, subtracts what its profiling run measured (the
weights, the peak activations of one batch of `max_num_batched_tokens`, and memory outside PyTorch: the
CUDA context) and fills the rest with KV blocks (vllm/v1/worker/gpu_worker.py, determine_available_memory;
it logs "GPU KV cache size: N tokens" and "Maximum concurrency for L tokens per request: X"). With tensor
parallelism every GPU holds its share of the KV heads for every token, so the smallest budget decides.

An estimate made without vLLM: the activations are those of one batch through the widest layer, and the
sampler's logits for `max_num_seqs` sequences; the figures vLLM logs at start-up are the measurement.
"""

from __future__ import annotations

from dataclasses import dataclass

from homespec.plan.devices import devices_for
from homespec.plan.fit import Plan
from homespec.plan.lines import LineKind, sum_bytes
from homespec.plan.memory import CUDA_RESERVE

# vLLM's defaults for `vllm serve` (vllm/engine/arg_utils.py): gpu_memory_utilization 0.9; the
# OpenAI server's max_num_batched_tokens 8192 and max_num_seqs 256.
DEFAULT_UTILIZATION = 0.9
MAX_BATCHED_TOKENS = 8192
MAX_SEQS = 256


@dataclass(frozen=True, slots=True)
class VllmKv:
    utilization: float
    budget_bytes: int  # KV memory per GPU (the smallest GPU's)
    per_token_bytes: int  # one token's K and V in every full-attention layer, per GPU
    per_sequence_bytes: int  # what a sequence adds whatever its length (sliding windows, recurrent state)
    tokens: int  # vLLM's "GPU KV cache size"
    sequences: int  # sequences of n_ctx tokens that fit at once
    n_ctx: int

    def line(self) -> str:
        return (f"vLLM's KV cache at --gpu-memory-utilization {self.utilization:g}: about {self.tokens:,} tokens, "
                f"{self.sequences:,} sequence(s) of {self.n_ctx:,} tokens at once (an estimate; vLLM logs "
                f"'GPU KV cache size' and 'Maximum concurrency' at start-up)")

    def as_json(self) -> dict:
        return {"gpu_memory_utilization": self.utilization, "budget_bytes": self.budget_bytes,
                "per_token_bytes": self.per_token_bytes, "per_sequence_bytes": self.per_sequence_bytes,
                "tokens": self.tokens, "sequences": self.sequences, "n_ctx": self.n_ctx}


def kv_elt_bytes(type_k: str) -> int:
    """vLLM caches KV in the model's 16-bit type, or fp8 (--kv-cache-dtype fp8, what a quantised plan emits)."""
    return 2 if type_k in ("f16", "bf16", "f32") else 1


def vllm_kv(plan: Plan, utilization: float = DEFAULT_UTILIZATION) -> VllmKv | None:
    """vLLM's KV capacity on the plan's GPUs (None without a CUDA / ROCm GPU: vLLM does not serve there)."""
    gpus = [d for d in devices_for(plan.machine) if d.is_gpu]
    if not gpus or any(d.vendor == "apple" for d in gpus):
        return None
    m, s, tp = plan.model, plan.settings, len(gpus)
    weights = sum(t.n_bytes for t in m.tensors or ()) + sum_bytes(plan.items, kinds={LineKind.DRAFT_WEIGHTS})
    activations = MAX_BATCHED_TOKENS * (2 * m.n_embd + 2 * max(m.n_ff, m.n_ff_exp * m.n_expert_used) // tp) * 2 \
        + MAX_SEQS * m.n_vocab * 4
    budget = min(int(g.capacity_bytes * utilization) for g in gpus) - weights // tp - activations - CUDA_RESERVE
    per_token, per_seq = _kv_shape(plan, tp, kv_elt_bytes(s.type_k))
    budget = max(0, budget)
    tokens = budget // per_token if per_token else 0
    seqs = budget // (per_token * s.n_ctx + per_seq) if per_token * s.n_ctx + per_seq else 0
    return VllmKv(utilization, budget, per_token, per_seq, tokens, seqs, s.n_ctx)


def _kv_shape(plan: Plan, tp: int, elt: int) -> tuple[int, int]:
    """(bytes per token, bytes per sequence) of KV on one GPU: full-attention layers grow with the tokens;
    vLLM's hybrid allocator gives a sliding-window layer its window, a recurrent layer its state; an EAGLE
    head adds its one layer."""
    m, s = plan.model, plan.settings
    heads = max(1, m.n_head_kv // tp)
    if m.is_mla:  # the compressed latent, replicated on every GPU
        row = (m.kv_lora_rank + m.qk_rope_head_dim) * elt
    else:
        row = heads * (m.head_dim + (m.head_dim_v or m.head_dim)) * elt
    full = swa = rs = 0
    for i in range(m.n_layer):
        if i in m.recurrent_layers:
            rs += (m.rs_r + m.rs_s) * 4
        elif m.sliding_window and i in m.swa_layers and not s.swa_full:
            swa += min(m.sliding_window, s.n_ctx) * row
        else:
            full += row
    d = plan.draft
    if d is not None and d.kind in ("eagle3", "eagle3.1"):
        full += d.n_layer * max(1, d.n_head_kv // tp) * d.head_dim * 2 * elt
    return full, swa + rs
