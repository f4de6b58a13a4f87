"""Load a Llama-family model from a GGUF file (any ggml type, dequantised) or a Hugging Face
safetensors directory into homespec.nets.llama.LlamaModel.

GGUF weights of the "llama"/"mistral" architectures were permuted by llama.cpp's converter so
that its RoPE can rotate adjacent pairs; `unpermute_qk` undoes that so one HF-style RoPE serves
every source.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from homespec.errors import FormatError, HomespecError
from homespec.formats.gguf import read_gguf_header
from homespec.formats.hf import load_safetensors, safetensors_files
from homespec.nets.config import PERMUTED_QK_ARCHS, LlamaConfig, config_from_gguf, read_hf_config, tensor_offsets
from homespec.nets.llama import LayerWeights, LlamaModel

# the planner's names (f32, f16, bf16: homespec.plan.settings) and torch's
_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "f32": torch.float32, "float16": torch.float16,
           "fp16": torch.float16, "f16": torch.float16, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}

# GGUF tensor name (within blk.N.) -> LayerWeights field
_GGUF_LAYER = {
    "attn_norm.weight": "attn_norm", "attn_q.weight": "wq", "attn_k.weight": "wk", "attn_v.weight": "wv",
    "attn_output.weight": "wo", "ffn_norm.weight": "ffn_norm", "ffn_gate.weight": "w_gate",
    "ffn_up.weight": "w_up", "ffn_down.weight": "w_down", "attn_q.bias": "bq", "attn_k.bias": "bk",
    "attn_v.bias": "bv", "attn_output.bias": "bo",
}
# HF name (within model.layers.N.) -> LayerWeights field
_HF_LAYER = {
    "input_layernorm.weight": "attn_norm", "self_attn.q_proj.weight": "wq", "self_attn.k_proj.weight": "wk",
    "self_attn.v_proj.weight": "wv", "self_attn.o_proj.weight": "wo", "post_attention_layernorm.weight": "ffn_norm",
    "mlp.gate_proj.weight": "w_gate", "mlp.up_proj.weight": "w_up", "mlp.down_proj.weight": "w_down",
    "self_attn.q_proj.bias": "bq", "self_attn.k_proj.bias": "bk", "self_attn.v_proj.bias": "bv",
    "self_attn.o_proj.bias": "bo", "mlp.gate_proj.bias": "b_gate", "mlp.up_proj.bias": "b_up",
    "mlp.down_proj.bias": "b_down",
}


def pick_device(requested: str | None = None) -> str:
    """cuda, then mps, then cpu; an explicit request wins (and is checked)."""
    if requested:
        if requested.startswith("cuda") and not torch.cuda.is_available():
            raise HomespecError(f"device {requested} requested but CUDA is not available", hint="use --device cpu")
        if requested == "mps" and not torch.backends.mps.is_available():
            raise HomespecError("device mps requested but Metal is not available", hint="use --device cpu")
        return requested
    if torch.cuda.is_available():
        return "cuda"
    if torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def pick_dtype(dtype: str | torch.dtype | None) -> torch.dtype:
    if dtype is None:
        return torch.float32  # the reference backend favours exactness over speed
    if isinstance(dtype, torch.dtype):
        return dtype
    try:
        return _DTYPES[dtype.lower()]
    except KeyError:
        raise HomespecError(f"unknown dtype {dtype!r}", hint=f"use one of {', '.join(sorted(_DTYPES))}") from None


def unpermute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of llama.cpp's converter permutation: rows of each head go from interleaved
    [x0, y0, x1, y1, ...] back to halves [x0, x1, ..., y0, y1, ...] (works for biases too)."""
    shape = w.shape
    return w.reshape(n_head, shape[0] // n_head // 2, 2, *shape[1:]).swapaxes(1, 2).reshape(shape)


def read_gguf_tensors(path: str) -> tuple[LlamaConfig, dict[str, np.ndarray]]:
    """Config plus every tensor dequantised to float32 numpy ([out, in]), in ggml names, with
    the q/k permutation undone. The header comes from homespec's bounded reader; tensor bytes
    are memory-mapped and dequantised by the gguf package."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    header = read_gguf_header(path)
    offsets = tensor_offsets(header)
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    out: dict[str, np.ndarray] = {}
    for t in header.tensors:
        qtype = GGMLQuantizationType[t.ggml_type]
        rows = t.n_elements // t.shape[0]
        data = raw[offsets[t.name]: offsets[t.name] + t.n_bytes].reshape(rows, t.n_bytes // rows)  # [rows, row bytes]
        try:
            a = dequantize(data, qtype)
        except NotImplementedError as exc:
            raise FormatError(
                f"{path}: tensor {t.name} has type {t.ggml_type}, which cannot be dequantised here",
                hint="use --backend llamacpp for this file",
            ) from exc
        out[t.name] = np.asarray(a, dtype=np.float32).reshape(tuple(reversed(t.shape)))  # numpy order: [out, in]
    rope = out.get("rope_freqs.weight")
    cfg = config_from_gguf(header, rope.tolist() if rope is not None else None)
    if cfg.arch in PERMUTED_QK_ARCHS:
        for name in list(out):
            if name.endswith(("attn_q.weight", "attn_q.bias")):
                out[name] = unpermute_qk(out[name], cfg.n_head)
            elif name.endswith(("attn_k.weight", "attn_k.bias")):
                out[name] = unpermute_qk(out[name], cfg.n_head_kv)
    return cfg, out


def _tensor(a: np.ndarray | torch.Tensor, device: str, dtype: torch.dtype) -> torch.Tensor:
    if isinstance(a, np.ndarray):
        # GGUF F32 tensors come back as read-only views of the memory-mapped file
        t = torch.from_numpy(a if a.flags.writeable else a.copy())
    else:
        t = a
    return t.to(device=device, dtype=dtype).contiguous()


def _need(tensors: dict, name: str, path: str):
    if name not in tensors:
        raise FormatError(f"{path}: missing tensor {name}", hint="the file is incomplete or not a Llama-family model")
    return tensors[name]


def _build(cfg, tensors, names, prefix_fn, embed_name, norm_name, head_name, path, device, dtype, max_context) -> LlamaModel:
    layers = []
    for i in range(cfg.n_layer):
        fields = {}
        for src, field in names.items():
            name = prefix_fn(i) + src
            if name in tensors:
                fields[field] = _tensor(tensors[name], device, dtype)
        for req in ("attn_norm", "wq", "wk", "wv", "wo", "ffn_norm", "w_gate", "w_up", "w_down"):
            if req not in fields:
                raise FormatError(f"{path}: layer {i} lacks {req}", hint="the file is incomplete")
        layers.append(LayerWeights(**fields))
    embed = _tensor(_need(tensors, embed_name, path), device, dtype)
    lm_head = embed if head_name not in tensors else _tensor(tensors[head_name], device, dtype)
    norm = _tensor(_need(tensors, norm_name, path), device, dtype)
    ctx = max_context or cfg.max_context
    return LlamaModel(cfg, embed, layers, norm, lm_head, max_context=ctx)


def load_gguf_model(path: str, *, device: str, dtype: torch.dtype, max_context: int | None) -> LlamaModel:
    cfg, tensors = read_gguf_tensors(path)
    return _build(cfg, tensors, _GGUF_LAYER, lambda i: f"blk.{i}.", "token_embd.weight", "output_norm.weight",
                  "output.weight", path, device, dtype, max_context)


def read_hf_tensors(directory: str) -> dict[str, torch.Tensor]:
    files = safetensors_files(directory)
    if not files:
        raise FormatError(f"{directory}: no *.safetensors files", hint="the download is incomplete: fetch the model's *.safetensors files")
    tensors: dict[str, torch.Tensor] = {}
    for f in files:
        tensors.update(load_safetensors(f))
    return tensors


def load_hf_model(directory: str, *, device: str, dtype: torch.dtype, max_context: int | None) -> LlamaModel:
    cfg = read_hf_config(directory)
    tensors = read_hf_tensors(directory)
    return _build(cfg, tensors, _HF_LAYER, lambda i: f"model.layers.{i}.", "model.embed_tokens.weight",
                  "model.norm.weight", "lm_head.weight" if not cfg.tied else "", directory, device, dtype, max_context)


def load_model(
    path: str, *, device: str | None = None, dtype: str | torch.dtype | None = None, max_context: int | None = None
) -> LlamaModel:
    """A GGUF file or a Hugging Face directory, on `device` (auto) in `dtype` (float32)."""
    p = Path(path)
    dev = pick_device(device)
    dt = pick_dtype(dtype)
    if p.is_dir():
        return load_hf_model(str(p), device=dev, dtype=dt, max_context=max_context)
    if p.is_file():
        return load_gguf_model(str(p), device=dev, dtype=dt, max_context=max_context)
    raise HomespecError(f"{path}: no such file or directory", hint="pass a .gguf file or a Hugging Face model directory")
