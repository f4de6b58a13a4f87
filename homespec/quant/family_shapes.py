"""Per-layer GGUF tensor shapes of the MoE, MLA and hybrid families, as llama.cpp's loaders create them.

Each block mirrors a `load_arch_tensors` in the vendored llama.cpp (src/models/<arch>.cpp), shapes in
ggml order (ne[0] is the row width; experts are the third dimension). homespec.quant.shapes calls these for a
catalogue or config.json model and predicts each tensor's type from them; tests write tiny GGUFs from
the same shapes and load them in llama.cpp, so a missing or extra tensor fails there.

Pure: no torch, no llama_cpp.
"""

from __future__ import annotations

from homespec.types import ModelSpec

Shape = tuple[int, ...]
FAMILY_ARCHS = ("qwen3moe", "gpt-oss", "deepseek2", "qwen3next", "qwen35moe", "glm4", "glm4moe", "llama4", "command-r",
                "cohere2")


def _moe(b: str, m: ModelSpec) -> list[tuple[str, Shape]]:
    """Router and routed experts (qwen3moe.cpp, openai-moe.cpp, deepseek2.cpp: ffn_*_exps)."""
    d, f, e = m.n_embd, m.n_ff_exp, m.n_expert
    return [(b + "ffn_gate_inp.weight", (d, e)), (b + "ffn_gate_exps.weight", (d, f, e)),
            (b + "ffn_down_exps.weight", (f, d, e)), (b + "ffn_up_exps.weight", (d, f, e))]


def _shexp(b: str, m: ModelSpec) -> list[tuple[str, Shape]]:
    d, f = m.n_embd, m.n_ff_shexp or m.n_ff_exp * m.n_expert_shared
    return [(b + "ffn_gate_shexp.weight", (d, f)), (b + "ffn_up_shexp.weight", (d, f)), (b + "ffn_down_shexp.weight", (f, d))]


def _qkv(b: str, m: ModelSpec, q_width: int) -> list[tuple[str, Shape]]:
    d, hd = m.n_embd, m.head_dim
    return [(b + "attn_q.weight", (d, q_width)), (b + "attn_k.weight", (d, m.n_head_kv * hd)),
            (b + "attn_v.weight", (d, m.n_head_kv * (m.head_dim_v or hd))),
            (b + "attn_output.weight", (m.n_head * (m.head_dim_v or hd), d))]


def qwen3moe_layer(m: ModelSpec, i: int) -> list[tuple[str, Shape]]:
    b, d = f"blk.{i}.", m.n_embd
    out = [(b + "attn_norm.weight", (d,)), (b + "ffn_norm.weight", (d,)),
           (b + "attn_q_norm.weight", (m.head_dim,)), (b + "attn_k_norm.weight", (m.head_dim,))]
    return out + _qkv(b, m, m.n_head * m.head_dim) + _moe(b, m)


def gpt_oss_layer(m: ModelSpec, i: int) -> list[tuple[str, Shape]]:
    """openai-moe.cpp: q/k/v/o with biases, per-head attention sinks, biased experts; the FFN norm is
    post_attention_norm."""
    b, d, f, e = f"blk.{i}.", m.n_embd, m.n_ff_exp, m.n_expert
    hd = m.head_dim
    out = [(b + "attn_norm.weight", (d,)), (b + "post_attention_norm.weight", (d,)),
           (b + "attn_q.bias", (m.n_head * hd,)), (b + "attn_k.bias", (m.n_head_kv * hd,)),
           (b + "attn_v.bias", (m.n_head_kv * hd,)), (b + "attn_output.bias", (d,)),
           (b + "attn_sinks.weight", (m.n_head,)), (b + "ffn_gate_inp.bias", (e,)),
           (b + "ffn_gate_exps.bias", (f, e)), (b + "ffn_down_exps.bias", (d, e)), (b + "ffn_up_exps.bias", (f, e))]
    return out + _qkv(b, m, m.n_head * hd) + _moe(b, m)


def deepseek2_layer(m: ModelSpec, i: int) -> list[tuple[str, Shape]]:
    """deepseek2.cpp with MLA (attn_k_b / attn_v_b split, as convert_hf_to_gguf.py writes them)."""
    b, d, nh = f"blk.{i}.", m.n_embd, m.n_head
    k_mla = m.qk_nope_head_dim + m.qk_rope_head_dim
    r, q = m.kv_lora_rank, m.q_lora_rank
    out = [(b + "attn_norm.weight", (d,)), (b + "attn_kv_a_norm.weight", (r,)), (b + "ffn_norm.weight", (d,)),
           (b + "attn_kv_a_mqa.weight", (d, r + m.qk_rope_head_dim)),
           (b + "attn_k_b.weight", (m.qk_nope_head_dim, r, nh)), (b + "attn_v_b.weight", (r, m.v_head_dim, nh)),
           (b + "attn_output.weight", (nh * m.v_head_dim, d))]
    if q:
        out += [(b + "attn_q_a_norm.weight", (q,)), (b + "attn_q_a.weight", (d, q)), (b + "attn_q_b.weight", (q, nh * k_mla))]
    else:
        out.append((b + "attn_q.weight", (d, nh * k_mla)))
    if i < m.n_layer_dense_lead:
        return out + [(b + "ffn_gate.weight", (d, m.n_ff)), (b + "ffn_up.weight", (d, m.n_ff)), (b + "ffn_down.weight", (m.n_ff, d))]
    return out + _moe(b, m) + _shexp(b, m)


def qwen3next_layer(m: ModelSpec, i: int) -> list[tuple[str, Shape]]:
    """qwen3next.cpp / qwen35moe.cpp: full attention (gated q: twice the width) every full_attn_interval-th
    layer, a Gated DeltaNet layer otherwise; every layer's FFN is routed experts plus a gated shared expert."""
    b, d = f"blk.{i}.", m.n_embd
    out = [(b + "attn_norm.weight", (d,)), (b + "post_attention_norm.weight", (d,))]
    if i not in m.recurrent_layers:
        out += _qkv(b, m, 2 * m.n_head * m.head_dim)
        out += [(b + "attn_q_norm.weight", (m.head_dim,)), (b + "attn_k_norm.weight", (m.head_dim,))]
    else:
        key_dim = m.linear_num_key_heads * m.linear_key_head_dim
        value_dim = m.linear_num_value_heads * m.linear_value_head_dim
        nv = m.linear_num_value_heads
        out += [(b + "attn_qkv.weight", (d, 2 * key_dim + value_dim)), (b + "attn_gate.weight", (d, value_dim)),
                (b + "ssm_conv1d.weight", (m.linear_conv_kernel_dim, 2 * key_dim + value_dim)),
                (b + "ssm_dt.bias", (nv,)), (b + "ssm_a", (nv,)),
                (b + "ssm_norm.weight", (m.linear_value_head_dim,)), (b + "ssm_out.weight", (value_dim, d))]
        if m.arch == "qwen35moe":  # qwen35moe.cpp: beta and alpha projections apart
            out += [(b + "ssm_beta.weight", (d, nv)), (b + "ssm_alpha.weight", (d, nv))]
        else:
            out.append((b + "ssm_ba.weight", (d, 2 * nv)))
    return out + _moe(b, m) + [(b + "ffn_gate_inp_shexp.weight", (d,))] + _shexp(b, m)


def _dense_ffn(b: str, m: ModelSpec) -> list[tuple[str, Shape]]:
    d, f = m.n_embd, m.n_ff
    return [(b + "ffn_gate.weight", (d, f)), (b + "ffn_up.weight", (d, f)), (b + "ffn_down.weight", (f, d))]


def glm4_layer(m: ModelSpec, i: int) -> list[tuple[str, Shape]]:
    """glm4.cpp (GLM-4-0414, the dense GLM-4): q/k/v with biases (config attention_bias, on in the published
    checkpoints), an RMS norm after attention and another after the MLP (post_attention_norm, post_ffw_norm,
    beside attn_norm and ffn_norm), and gate and up fused in one ffn_up of twice the FFN width
    (HF gate_up_proj; glm4.cpp: ffn_up {n_embd, 2 n_ff})."""
    b, d, hd = f"blk.{i}.", m.n_embd, m.head_dim
    return [(b + "attn_norm.weight", (d,)), (b + "post_attention_norm.weight", (d,)), (b + "ffn_norm.weight", (d,)),
            (b + "post_ffw_norm.weight", (d,)), (b + "attn_q.bias", (m.n_head * hd,)),
            (b + "attn_k.bias", (m.n_head_kv * hd,)), (b + "attn_v.bias", (m.n_head_kv * (m.head_dim_v or hd),))] + \
        _qkv(b, m, m.n_head * hd) + [(b + "ffn_up.weight", (d, 2 * m.n_ff)), (b + "ffn_down.weight", (m.n_ff, d))]


def glm4moe_layer(m: ModelSpec, i: int) -> list[tuple[str, Shape]]:
    """glm4-moe.cpp (GLM-4.5 / 4.5-Air): q/k/v biases, post_attention_norm as the FFN norm, dense
    leading layers, then router + expert-score bias + experts + shared expert."""
    b, d, hd = f"blk.{i}.", m.n_embd, m.head_dim
    out = [(b + "attn_norm.weight", (d,)), (b + "post_attention_norm.weight", (d,)),
           (b + "attn_q.bias", (m.n_head * hd,)), (b + "attn_k.bias", (m.n_head_kv * hd,)),
           (b + "attn_v.bias", (m.n_head_kv * hd,))] + _qkv(b, m, m.n_head * hd)
    if i < m.n_layer_dense_lead:
        return out + _dense_ffn(b, m)
    out += _moe(b, m) + [(b + "exp_probs_b.bias", (m.n_expert,))]
    return out + (_shexp(b, m) if m.n_expert_shared or m.n_ff_shexp else [])


def llama4_layer(m: ModelSpec, i: int) -> list[tuple[str, Shape]]:
    """llama4.cpp: every moe_every-th layer routed experts + a shared expert, the others dense."""
    b, d = f"blk.{i}.", m.n_embd
    out = [(b + "attn_norm.weight", (d,)), (b + "ffn_norm.weight", (d,))] + _qkv(b, m, m.n_head * m.head_dim)
    if not m.is_moe_layer(i):
        return out + _dense_ffn(b, m)
    shexp = m.n_ff_exp  # llama4.cpp: n_ff_shexp = n_ff_exp
    return out + _moe(b, m) + [(b + "ffn_gate_shexp.weight", (d, shexp)), (b + "ffn_up_shexp.weight", (d, shexp)),
                               (b + "ffn_down_shexp.weight", (shexp, d))]


def command_r_layer(m: ModelSpec, i: int) -> list[tuple[str, Shape]]:
    """command-r.cpp / cohere2.cpp: attention and FFN in parallel off one attn_norm; Command R+ (64+
    layers) adds per-head q/k norms."""
    b, d, hd = f"blk.{i}.", m.n_embd, m.head_dim
    out = [(b + "attn_norm.weight", (d,))] + _qkv(b, m, m.n_head * hd) + _dense_ffn(b, m)
    if m.arch == "command-r" and m.n_layer >= 64:
        out += [(b + "attn_q_norm.weight", (hd, m.n_head)), (b + "attn_k_norm.weight", (hd, m.n_head_kv))]
    return out


LAYER_SHAPES = {"qwen3moe": qwen3moe_layer, "gpt-oss": gpt_oss_layer, "deepseek2": deepseek2_layer,
                "qwen3next": qwen3next_layer, "qwen35moe": qwen3next_layer, "glm4": glm4_layer,
                "glm4moe": glm4moe_layer, "llama4": llama4_layer, "command-r": command_r_layer,
                "cohere2": command_r_layer}
# Architectures whose output matrix is always the token embedding (command-r.cpp, cohere2.cpp)
ALWAYS_TIED = frozenset({"command-r", "cohere2"})


def deltanet_state(m: ModelSpec) -> tuple[int, int]:
    """(n_embd_r, n_embd_s) of a Gated DeltaNet layer: the ssm.* keys the converter writes are
    conv_kernel, inner_size = value dim, state_size = key head dim, group_count = key heads
    (llama-hparams.cpp: (d_conv - 1)(d_inner + 2 n_group d_state), d_state x d_inner)."""
    key_dim = m.linear_num_key_heads * m.linear_key_head_dim
    value_dim = m.linear_num_value_heads * m.linear_value_head_dim
    return (m.linear_conv_kernel_dim - 1) * (value_dim + 2 * key_dim), m.linear_key_head_dim * value_dim
