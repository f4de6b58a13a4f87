"""Tiny random-weight GGUFs of the MoE, sliding-window, hybrid and MLA families, for checking the
planner against the buffers llama.cpp allocates when it loads them, and for running them.

The tensors are the ones homespec predicts for the shape (homespec.quant.model_tensor_shapes): a file
llama.cpp loads proves the predicted tensor set is the one its loader creates (a missing tensor or an
extra one fails the load). Metadata keys are llama.cpp's (src/llama-arch.cpp). Everything is F32
(norms ones, matrices small Gaussians); the tokenizer is SmolLM2's, as in tests/tiny_models.py.

`mtp=N` appends N next-token-prediction blocks after the trunk, as convert_hf_to_gguf.py writes a
Qwen3.5 / GLM-4.5 / DeepSeek-V3 checkpoint's MTP layers: `{arch}.nextn_predict_layers` = N, block_count
counting them, each block a full-attention layer of the family plus `nextn.eh_proj` [2H -> H],
`nextn.enorm` and `nextn.hnorm` (src/models/qwen35moe.cpp, glm4-moe.cpp: load_block_mtp).

`predictable=True` makes the model a near-function of its last token, next = succ(token): unit-variance
token embeddings dominate every residual stream (the layers' matrices are a tenth of the usual small
Gaussians and only nudge it), and the output head's row for succ(t) is t's embedding (scaled so that the
greedy token takes ~70 % of the probability at temperature 0.9: sampled answers vary with the seed and
still mostly take it). succ walks blocks of CYCLE consecutive ids round (t -> t + 1, the block's last back
to its first), so greedy text cycles every CYCLE tokens, which lookups find. The MTP block's eh_proj
passes the token's embedding through, so it predicts succ of the token it is given: what the trunk
predicts one step later. Drafts are then mostly accepted: a tiny stand-in for a trained model whose
drafts pay (its acceptance says nothing about a real model's).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np

from homespec.formats.families import complete
from homespec.types import ModelSpec


def _base(arch: str, **kw) -> ModelSpec:
    shape = dict(name=f"tiny-{arch}", arch=arch, n_layer=4, n_embd=64, n_head=4, n_head_kv=2, head_dim=16,
                 n_ff=128, n_vocab=49152, n_ctx_train=4096, tied_embeddings=False, rope_theta=10000.0)
    shape.update(kw)
    return complete(ModelSpec(**shape))


# One small shape per family (the numbers only need to satisfy each loader's asserts).
FAMILIES: dict[str, ModelSpec] = {
    "qwen3moe": _base("qwen3moe", n_expert=4, n_expert_used=2, n_ff_exp=32),
    "gpt-oss": _base("gpt-oss", n_expert=4, n_expert_used=2, n_ff_exp=32, sliding_window=128,
                     swa_layers=(0, 2)),
    "gemma3": _base("gemma3", n_layer=6, tied_embeddings=True, sliding_window=256, swa_layers=(0, 1, 2, 3, 4)),
    "qwen3next": _base("qwen3next", n_expert=4, n_expert_used=2, n_ff_exp=32, n_ff_shexp=48, full_attn_interval=4,
                       linear_num_key_heads=2, linear_key_head_dim=16, linear_num_value_heads=4,
                       linear_value_head_dim=16, linear_conv_kernel_dim=4),
    "qwen35moe": _base("qwen35moe", n_expert=4, n_expert_used=2, n_ff_exp=32, n_ff_shexp=48, full_attn_interval=4,
                       linear_num_key_heads=2, linear_key_head_dim=16, linear_num_value_heads=4,
                       linear_value_head_dim=16, linear_conv_kernel_dim=4),
    "deepseek2": _base("deepseek2", n_layer=3, n_expert=4, n_expert_used=2, n_ff_exp=32, n_expert_shared=1,
                       n_layer_dense_lead=1, kv_lora_rank=32, q_lora_rank=24, qk_rope_head_dim=16,
                       qk_nope_head_dim=16, v_head_dim=16),
    "glm4": _base("glm4", n_layer=3),
    "glm4moe": _base("glm4moe", n_layer=3, n_expert=4, n_expert_used=2, n_ff_exp=32, n_expert_shared=1,
                     n_layer_dense_lead=1),
    "llama4": _base("llama4", n_expert=4, n_expert_used=1, n_ff_exp=32, moe_every=2, sliding_window=8192,
                    swa_layers=(0, 1, 2)),
    "command-r": _base("command-r", n_layer=2, tied_embeddings=True),
}


def _metadata(m: ModelSpec) -> dict[str, int | float]:
    """{key suffix: value} for the architecture (prefixed with the arch name when written)."""
    md: dict[str, int | float] = {
        "block_count": m.n_layer + m.n_nextn_layer, "context_length": m.n_ctx_train, "embedding_length": m.n_embd,
        "feed_forward_length": m.n_ff, "attention.head_count": m.n_head, "attention.head_count_kv": m.n_head_kv,
        "attention.key_length": m.head_dim, "attention.value_length": m.head_dim_v or m.head_dim,
        "rope.dimension_count": m.head_dim, "rope.freq_base": m.rope_theta or 10000.0,
        "attention.layer_norm_rms_epsilon": 1e-6, "vocab_size": m.n_vocab,
    }
    if m.is_moe:
        md.update({"expert_count": m.n_expert, "expert_used_count": m.n_expert_used,
                   "expert_feed_forward_length": m.n_ff_exp})
    if m.n_expert_shared:
        md["expert_shared_count"] = m.n_expert_shared
    if m.n_ff_shexp:
        md["expert_shared_feed_forward_length"] = m.n_ff_shexp
    if m.n_layer_dense_lead:
        md["leading_dense_block_count"] = m.n_layer_dense_lead
    if m.moe_every > 1:
        md["interleave_moe_layer_step"] = m.moe_every
    if m.n_nextn_layer:
        md["nextn_predict_layers"] = m.n_nextn_layer
    if m.arch == "command-r":
        md["attention.layer_norm_epsilon"] = 1e-5  # LayerNorm, not RMSNorm
    if m.sliding_window:
        md["attention.sliding_window"] = m.sliding_window
    if m.is_mla:
        # convert_hf_to_gguf.py's MLA layout: one KV head of kv_lora_rank + rope dims, K only
        md.update({"attention.kv_lora_rank": m.kv_lora_rank, "attention.q_lora_rank": m.q_lora_rank,
                   "attention.key_length_mla": m.qk_nope_head_dim + m.qk_rope_head_dim,
                   "attention.value_length_mla": m.v_head_dim, "rope.dimension_count": m.qk_rope_head_dim})
    if m.recurrent_layers:
        key_dim = m.linear_num_key_heads * m.linear_key_head_dim
        md.update({"ssm.conv_kernel": m.linear_conv_kernel_dim, "ssm.state_size": m.linear_key_head_dim,
                   "ssm.group_count": m.linear_num_key_heads, "ssm.time_step_rank": m.linear_num_value_heads,
                   "ssm.inner_size": m.linear_num_value_heads * m.linear_value_head_dim,
                   "full_attention_interval": m.full_attn_interval})
        assert key_dim > 0
    return md


def mtp_tensor_shapes(m: ModelSpec) -> list[tuple[str, tuple[int, ...]]]:
    """The MTP blocks' tensors: the family's full-attention layer at index n_layer + j, and NextN's own."""
    from homespec.quant.family_shapes import LAYER_SHAPES

    out = []
    for il in range(m.n_layer, m.n_layer + m.n_nextn_layer):
        b, d = f"blk.{il}.nextn.", m.n_embd
        out += LAYER_SHAPES[m.arch](m, il)
        out += [(b + "eh_proj.weight", (2 * d, d)), (b + "enorm.weight", (d,)), (b + "hnorm.weight", (d,))]
    return out


CYCLE = 16  # the predictable model's cycle length (module docstring)
OUT_SCALE = 0.22  # its output head: the greedy logit ~0.22 * n_embd, the rest ~N(0, 0.22^2 * n_embd): p ~0.7 at T 0.9


def successor(token: int) -> int:
    """The predictable model's next token after `token`."""
    return token - token % CYCLE + (token % CYCLE + 1) % CYCLE


def _tensor(name: str, np_shape: tuple[int, ...], rng: np.random.Generator, predictable: bool,
            embd: np.ndarray | None) -> np.ndarray:
    if len(np_shape) == 1 and name.endswith("norm.weight"):
        return np.ones(np_shape, dtype=np.float32)
    data = (0.02 * rng.standard_normal(np_shape)).astype(np.float32)
    if not predictable:
        return data
    if name == "token_embd.weight":
        return data * 50.0  # unit variance: the token's embedding dominates every residual stream
    if name == "output.weight" and embd is not None:  # [V, H]: row succ(t) is t's embedding
        out = np.empty_like(embd)
        out[[successor(t) for t in range(len(embd))]] = embd
        return out * OUT_SCALE
    data *= 0.1  # the layers nudge the stream by ~0.2 %
    if name.endswith("nextn.eh_proj.weight"):  # [H, 2H]: the token's half passed through
        data[:, :np_shape[0]] += np.eye(np_shape[0], dtype=np.float32)
    return data


def make_family_gguf(path: str | os.PathLike, family: str, *, seed: int = 0, mtp: int = 0, predictable: bool = False,
                     **changes) -> Path:
    """Write the family's tiny GGUF (FAMILIES[family], with `changes` applied to its shape), with `mtp`
    MTP blocks after the trunk (module docstring)."""
    from gguf import GGUFValueType, GGUFWriter

    from homespec.quant.shapes import model_tensor_shapes
    from tiny_models import _default_vocab_source, _tokenizer_fields, finish_gguf

    spec = FAMILIES[family]
    if changes or mtp:
        spec = complete(dataclasses.replace(spec, n_nextn_layer=mtp, **changes))
    path = Path(path)
    rng = np.random.default_rng(seed)
    tmp = path.with_name(path.name + ".tmp")
    writer = GGUFWriter(str(tmp), spec.arch)
    writer.add_name(f"tiny-{family}")
    writer.add_file_type(0)
    for key, value in _metadata(spec).items():
        vtype = GGUFValueType.FLOAT32 if isinstance(value, float) else GGUFValueType.UINT32
        writer.add_key_value(f"{spec.arch}.{key}", value, vtype)
    if spec.arch == "qwen35moe":  # multimodal rope sections, required by qwen35moe.cpp
        writer.add_array(f"{spec.arch}.rope.dimension_sections", [4, 2, 2, 0])
    for key, value, vtype, sub in _tokenizer_fields(str(_default_vocab_source())):
        writer.add_key_value(key, value, vtype, sub)
    embd, shapes = None, model_tensor_shapes(spec) + mtp_tensor_shapes(spec)
    if predictable:  # the output head is made from the embeddings: those first
        shapes.sort(key=lambda t: t[0] != "token_embd.weight")
    for name, shape in shapes:
        np_shape = tuple(reversed(shape))  # numpy is row-major: outermost first
        data = _tensor(name, np_shape, rng, predictable, embd)
        embd = data if name == "token_embd.weight" else embd
        writer.add_tensor(name, data)
    return finish_gguf(writer, tmp, path)
