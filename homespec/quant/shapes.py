"""Tensor names and shapes of a ModelSpec, as llama.cpp's converter (convert_hf_to_gguf.py) writes
them and src/models/<arch>.cpp loads them, in the loader's order; and the parameter count.

Shapes are ggml order: ne[0] is the input (row) width. The MoE / MLA / hybrid families' layer
layouts live in homespec/quant/family_shapes.py. Pure: no torch, no llama_cpp.
"""

from __future__ import annotations

import math
import re

from homespec.errors import HomespecError
from homespec.quant.family_shapes import ALWAYS_TIED, FAMILY_ARCHS, LAYER_SHAPES
from homespec.types import ModelSpec

# Mistral 7B / Nemo / Small convert to the llama architecture; Mistral Small 3.x to mistral3, whose
# dense layers are llama's (src/models/mistral3.cpp)
_ARCH_ALIASES = {"mistral": "llama", "mistral3": "llama"}
_ARCHS = ("llama", "qwen2", "qwen3", "gemma2", "gemma3", "phi3")


def base_arch(arch: str) -> str:
    """The architecture whose tensors and quantiser rules `arch` shares ("mistral" -> "llama")."""
    return _ARCH_ALIASES.get(arch, arch)


def _has_llama3_rope_freqs(model: ModelSpec) -> bool:
    # Llama 3.1+ ship rope_scaling {"rope_type": "llama3"}; the converter stores the per-dimension
    # factors as rope_freqs.weight. A ModelSpec does not carry rope_scaling, so recognise the
    # family by its tokenizer (128256 tokens), base 500000 and 128K context.
    return model.n_vocab == 128256 and (model.rope_theta or 0) == 500000.0 and model.n_ctx_train >= 131072


def model_tensor_shapes(model: ModelSpec) -> list[tuple[str, tuple[int, ...]]]:
    """GGUF tensor names and shapes for the model, in llama.cpp's loader order."""
    arch = base_arch(model.arch)
    if arch in LAYER_SHAPES:
        return _family_shapes(model, arch)
    if arch not in _ARCHS:
        raise HomespecError(
            f"homespec cannot predict the tensors of a '{model.arch}' model",
            hint="point --model at the GGUF file (its header lists the real tensors); known: "
                 + ", ".join(_ARCHS + FAMILY_ARCHS),
        )
    d, hd, hdv = model.n_embd, model.head_dim, model.head_dim_v or model.head_dim
    q, k, v = model.n_head * hd, model.n_head_kv * hd, model.n_head_kv * hdv
    out: list[tuple[str, tuple[int, ...]]] = [("token_embd.weight", (d, model.n_vocab)), ("output_norm.weight", (d,))]
    if not model.tied_embeddings and arch != "gemma2":  # Gemma 2 always reuses token_embd as output
        out.append(("output.weight", (d, model.n_vocab)))
    if arch == "llama" and _has_llama3_rope_freqs(model):
        out.append(("rope_freqs.weight", (hd // 2,)))
    for i in range(model.n_layer):
        b = f"blk.{i}."
        layer = [(b + "attn_norm.weight", (d,)), (b + "ffn_norm.weight", (d,)),
                 (b + "attn_output.weight", (model.n_head * hdv, d)), (b + "ffn_down.weight", (model.n_ff, d))]
        if arch == "phi3":  # fused projections: qkv in one matrix, gate+up in one matrix
            layer += [(b + "attn_qkv.weight", (d, q + k + v)), (b + "ffn_up.weight", (d, 2 * model.n_ff))]
        else:
            layer += [(b + "attn_q.weight", (d, q)), (b + "attn_k.weight", (d, k)), (b + "attn_v.weight", (d, v)),
                      (b + "ffn_gate.weight", (d, model.n_ff)), (b + "ffn_up.weight", (d, model.n_ff))]
        if arch == "qwen2":
            layer += [(b + "attn_q.bias", (q,)), (b + "attn_k.bias", (k,)), (b + "attn_v.bias", (v,))]
        if arch in ("qwen3", "gemma3"):
            layer += [(b + "attn_q_norm.weight", (hd,)), (b + "attn_k_norm.weight", (hd,))]
        if arch in ("gemma2", "gemma3"):
            layer += [(b + "post_attention_norm.weight", (d,)), (b + "post_ffw_norm.weight", (d,))]
        out += layer
    return sorted(out, key=_loader_order)


def _family_shapes(model: ModelSpec, arch: str) -> list[tuple[str, tuple[int, ...]]]:
    d = model.n_embd
    out: list[tuple[str, tuple[int, ...]]] = [("token_embd.weight", (d, model.n_vocab)), ("output_norm.weight", (d,))]
    if not model.tied_embeddings and arch not in ALWAYS_TIED:
        out.append(("output.weight", (d, model.n_vocab)))
    layer = LAYER_SHAPES[arch]
    for i in range(model.n_layer):
        out += layer(model, i)
    return sorted(out, key=_loader_order)


def _loader_order(item: tuple[str, tuple[int, ...]]) -> tuple[int, str]:
    # llama_model_loader.weights_map sorts by block number (non-block tensors first), then by name;
    # the quantiser's per-layer counters advance in this order.
    n = layer_of(item[0])
    return (-1 if n is None else n, item[0])


def layer_of(name: str) -> int | None:
    """The block number of a `blk.N.` tensor, None for the others (token_embd, output, norms)."""
    m = re.match(r"blk\.(\d+)\.", name)
    return int(m.group(1)) if m else None


def n_params(model: ModelSpec) -> int:
    """Parameter count from the architecture (the tied output counted once, as HF does)."""
    return sum(math.prod(s) for n, s in model_tensor_shapes(model) if n != "rope_freqs.weight")
