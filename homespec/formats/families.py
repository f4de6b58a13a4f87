"""Architecture-family hyperparameters from a GGUF header: experts, MLA, recurrent state, MTP layers.

Each key is llama.cpp's (`src/llama-arch.cpp` LLM_KV_*, prefixed with the architecture name), and each
rule cites the loader that applies it (`src/models/<arch>.cpp`, `src/llama-model.cpp` create_memory,
`src/llama-hparams.cpp`) in the vendored llama.cpp of llama-cpp-python 0.3.36. docs/planner.md gives
the formulas with a worked example.

Pure: no llama_cpp, no torch.
"""

from __future__ import annotations

from typing import Any

from homespec.quant.family_shapes import deltanet_state

# llm_arch_is_recurrent (llama-arch.cpp): every layer is a recurrent layer, there is no KV cache.
RECURRENT_ARCHS = frozenset({"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"})
# llm_arch_is_hybrid: attention layers hold KV, the others a recurrent state.
HYBRID_ARCHS = frozenset({"jamba", "falcon-h1", "plamo2", "granite-hybrid", "lfm2", "lfm2moe", "nemotron_h",
                          "nemotron_h_moe", "qwen3next", "kimi-linear", "bailingmoe3", "kimi-k3", "glm5-next",
                          "qwen35", "qwen35moe", "qwen4exp", "deepseek4", "minimax-01"})
# llm_arch_supports_rs_rollback (llama-arch.cpp): llama.cpp keeps per-token snapshots of their recurrent
# state (n_rs_seq), so rejected draft tokens are given back without decoding again (backends/llamacpp/rollback.py).
RS_ROLLBACK_ARCHS = frozenset({"kimi-k3", "qwen35", "qwen35moe", "qwen4exp", "deepseek4", "glm5-next", "nemotron_h",
                               "nemotron_h_moe", "lfm2", "lfm2moe", "bailingmoe3"})
# Gated DeltaNet hybrids: attention every full_attention_interval-th layer (src/models/qwen3next.cpp:
# is_recr = (i + 1) % interval != 0, default 4), unless attention.recurrent_layers lists them.
_DELTANET = frozenset({"qwen3next", "qwen35", "qwen35moe"})
# Recurrent state formulas homespec implements (llama-hparams.cpp n_embd_r / n_embd_s): Mamba-style
# SSM/conv state (also the Gated DeltaNet's: its ssm.* keys give the same shapes) and RWKV's shift/wkv state.
_STATE_KNOWN = frozenset({"mamba", "mamba2", "jamba", "falcon-h1", "granite-hybrid", "nemotron_h", "nemotron_h_moe",
                          "plamo2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"}) | _DELTANET
# Architectures whose create_memory (llama-model.cpp) builds a cache other than the standard one
# (sparse-attention indexers, compressed or shared caches): homespec sizes them with the generic rule.
SPECIAL_CACHE_ARCHS = frozenset({"minimax-m3", "glm-dsa", "deepseek32", "glm5-next", "hy-v4", "dots3note",
                                 "deepseek4", "dflash", "gemma3n", "gemma4", "gemma4-assistant", "qwen4exp"})


def _int(md: dict, key: str, default: int = 0) -> int:
    v = md.get(key)
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, list) and v and all(isinstance(x, int) for x in v):
        return max(v)
    return default


def _layers_from_list(value: Any, n_layer: int) -> tuple[int, ...] | None:
    if isinstance(value, list) and value:
        return tuple(i for i, flag in enumerate(value[:n_layer]) if flag)
    return None


def recurrent_layers(md: dict, arch: str, n_layer: int, heads_kv: list[int]) -> tuple[int, ...]:
    """The layers that keep a recurrent state instead of KV."""
    if arch in RECURRENT_ARCHS:
        return tuple(range(n_layer))
    if arch not in HYBRID_ARCHS:
        return ()
    listed = _layers_from_list(md.get(f"{arch}.attention.recurrent_layers"), n_layer)
    if listed is not None:
        return listed
    if arch in _DELTANET:
        interval = _int(md, f"{arch}.full_attention_interval", 4) or 4
        return tuple(i for i in range(n_layer) if (i + 1) % interval != 0)
    # Jamba, Granite-hybrid, Nemotron-H, Falcon-H1 ...: a layer with 0 KV heads is recurrent
    return tuple(i for i in range(n_layer) if i < len(heads_kv) and heads_kv[i] == 0)


def recurrent_state(md: dict, arch: str, n_embd: int) -> tuple[int, int]:
    """(n_embd_r, n_embd_s): f32 elements per sequence per recurrent layer (llama-hparams.cpp)."""
    wkv = _int(md, f"{arch}.wkv.head_size")
    if wkv:  # RWKV: token shift state and the wkv state
        return _int(md, f"{arch}.token_shift_count", 2) * n_embd, n_embd * wkv
    d_conv, d_inner = _int(md, f"{arch}.ssm.conv_kernel"), _int(md, f"{arch}.ssm.inner_size")
    d_state, n_group = _int(md, f"{arch}.ssm.state_size"), _int(md, f"{arch}.ssm.group_count")
    # Mamba's conv_states keep d_conv - 1 columns of (d_inner + 2 n_group d_state); ssm_states d_state x d_inner
    return max(0, d_conv - 1) * (d_inner + 2 * n_group * d_state), d_state * d_inner


def family_fields(md: dict, arch: str, n_layer_all: int, n_embd: int, heads_kv: list[int]) -> dict:
    """ModelSpec keyword arguments for the family parts of a GGUF header (all absent for a dense model)."""
    nextn = _int(md, f"{arch}.nextn_predict_layers")
    n_layer = n_layer_all - nextn if 0 < nextn < n_layer_all else n_layer_all
    out: dict = {"n_layer": n_layer, "n_nextn_layer": n_layer_all - n_layer}
    n_expert = _int(md, f"{arch}.expert_count")
    if n_expert > 1:
        out.update(n_expert=n_expert, n_expert_used=_int(md, f"{arch}.expert_used_count"),
                   n_ff_exp=_int(md, f"{arch}.expert_feed_forward_length"),
                   n_expert_shared=_int(md, f"{arch}.expert_shared_count"),
                   n_ff_shexp=_int(md, f"{arch}.expert_shared_feed_forward_length"),
                   n_layer_dense_lead=_int(md, f"{arch}.leading_dense_block_count"),
                   moe_every=_int(md, f"{arch}.interleave_moe_layer_step", 1) or 1)
    k_mla = _int(md, f"{arch}.attention.key_length_mla")
    kv_lora = _int(md, f"{arch}.attention.kv_lora_rank")
    if k_mla and kv_lora:
        # MLA as llama.cpp stores it: key_length = kv_lora_rank + rope dims, one KV head, K only
        rope = _int(md, f"{arch}.rope.dimension_count") or (_int(md, f"{arch}.attention.key_length") - kv_lora)
        out.update(kv_lora_rank=kv_lora, q_lora_rank=_int(md, f"{arch}.attention.q_lora_rank"), qk_rope_head_dim=rope,
                   qk_nope_head_dim=k_mla - rope, v_head_dim=_int(md, f"{arch}.attention.value_length_mla"))
    recr = recurrent_layers(md, arch, n_layer, heads_kv)
    if recr:
        r, s = recurrent_state(md, arch, n_embd)
        out.update(recurrent_layers=recr, rs_r=r, rs_s=s)
        if arch in _DELTANET:
            out["full_attn_interval"] = _int(md, f"{arch}.full_attention_interval", 4) or 4
    out["kv_rule_note"] = kv_rule_note(arch, bool(recr))
    return out


def kv_rule_note(arch: str, recurrent: bool) -> str:
    """Why the cache size is an assumption for this architecture ("" when homespec knows its rule)."""
    if arch in SPECIAL_CACHE_ARCHS:
        return (f"warning: llama.cpp builds a special cache for '{arch}' models that homespec does not model; "
                "its KV is planned with the generic rule (every attention layer, n_head_kv x head dims)")
    if recurrent and arch not in _STATE_KNOWN:
        return (f"warning: homespec does not know the recurrent state size of '{arch}' layers; planned with the "
                "Mamba rule from its ssm.* keys (0 when it has none)")
    return ""


# --- catalogue and config.json specs: the same fields from their own key names -------------------

# schema keys of a catalogue [[model]] entry that map one-to-one onto ModelSpec fields
CATALOGUE_KEYS = ("n_params_active", "n_expert", "n_expert_used", "n_ff_exp", "n_expert_shared", "n_ff_shexp",
                  "n_layer_dense_lead", "moe_every", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim",
                  "qk_nope_head_dim", "v_head_dim", "full_attn_interval", "linear_num_key_heads",
                  "linear_key_head_dim", "linear_num_value_heads", "linear_value_head_dim",
                  "linear_conv_kernel_dim", "n_nextn_layer")

# Hugging Face config.json names -> ModelSpec fields (Qwen3-MoE / Qwen3-Next, DeepSeek-V2/V3, gpt-oss,
# Mixtral, GLM-4.5, Llama 4), first match wins
HF_KEYS = {
    "n_expert": ("num_experts", "n_routed_experts", "num_local_experts"),
    "n_expert_used": ("num_experts_per_tok", "num_experts_per_token"),
    "n_ff_exp": ("moe_intermediate_size",),
    "n_expert_shared": ("n_shared_experts",),
    "n_ff_shexp": ("shared_expert_intermediate_size",),
    "n_layer_dense_lead": ("first_k_dense_replace",),
    "moe_every": ("interleave_moe_layer_step",),
    "kv_lora_rank": ("kv_lora_rank",), "q_lora_rank": ("q_lora_rank",),
    "qk_rope_head_dim": ("qk_rope_head_dim",), "qk_nope_head_dim": ("qk_nope_head_dim",),
    "v_head_dim": ("v_head_dim",),
    "full_attn_interval": ("full_attention_interval",),
    "linear_num_key_heads": ("linear_num_key_heads",), "linear_key_head_dim": ("linear_key_head_dim",),
    "linear_num_value_heads": ("linear_num_value_heads",), "linear_value_head_dim": ("linear_value_head_dim",),
    "linear_conv_kernel_dim": ("linear_conv_kernel_dim",),
    "n_nextn_layer": ("num_nextn_predict_layers", "mtp_num_hidden_layers"),
}


def hf_family_fields(c: dict, arch: str) -> dict:
    """ModelSpec fields from a (text) config.json; gpt-oss names its expert width intermediate_size."""
    out = {}
    for field, names in HF_KEYS.items():
        for n in names:
            v = c.get(n)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                out[field] = v
                break
    if out.get("n_expert", 0) > 1 and "n_ff_exp" not in out:
        out["n_ff_exp"] = int(c.get("intermediate_size") or 0)
    return out


def complete(spec):
    """Derived fields of a catalogue / config.json spec: recurrent layers and their state, MLA's cache view."""
    from dataclasses import replace

    changes: dict = {}
    if spec.arch in _DELTANET and spec.linear_num_value_heads:
        interval = spec.full_attn_interval or 4
        changes["recurrent_layers"] = tuple(i for i in range(spec.n_layer) if (i + 1) % interval != 0)
        changes["full_attn_interval"] = interval
        changes["rs_r"], changes["rs_s"] = deltanet_state(spec)
    if spec.kv_lora_rank:
        # llama.cpp stores MLA as one KV "head" of kv_lora_rank + rope dims (convert_hf_to_gguf.py writes
        # key_length = kv_lora_rank + qk_rope_head_dim, value_length = kv_lora_rank, head_count_kv = 1)
        changes.update(n_head_kv=1, head_dim=spec.kv_lora_rank + spec.qk_rope_head_dim, head_dim_v=spec.kv_lora_rank)
    if spec.is_moe and not spec.n_ff_exp:
        changes["n_ff_exp"] = spec.n_ff // max(1, spec.n_expert_used)
    return replace(spec, **changes) if changes else spec
