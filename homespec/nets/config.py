"""The shape of a Llama-family model (Llama, Mistral, Qwen2, SmolLM2), read from a GGUF header or config.json.

Imports neither torch nor llama_cpp: the planner may read a config without starting an engine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from homespec.errors import FormatError
from homespec.formats.gguf import read_gguf_header
from homespec.formats.hf import load_config

# GGUF architectures whose converter permutes the q/k rows (llama.cpp `LlamaModel.permute`): their
# RoPE rotates adjacent pairs (rope type NORM); the others use the NEOX/HF half-split pairing.
PERMUTED_QK_ARCHS = frozenset({"llama", "mistral"})
SUPPORTED_ARCHS = frozenset({"llama", "mistral", "qwen2"})
_HF_ARCHS = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2"}  # HF model_type -> GGUF arch


@dataclass(frozen=True, slots=True)
class RopeScaling:
    """Llama-3 ("llama3") frequency scaling; HF `rope_scaling` with rope_type "llama3"."""

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position_embeddings: int


@dataclass(frozen=True, slots=True)
class LlamaConfig:
    arch: str  # GGUF architecture name: "llama" | "mistral" | "qwen2"
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_vocab: int
    rms_eps: float
    rope_theta: float
    max_context: int  # the training context (n_ctx_train)
    tied: bool = False  # lm_head shares the token embedding
    qkv_bias: bool = False  # Qwen2: biases on q/k/v
    o_bias: bool = False  # HF Llama `attention_bias` also puts one on o_proj
    mlp_bias: bool = False
    rope_scaling: RopeScaling | None = None
    # Per-frequency divisors as llama.cpp stores them (GGUF `rope_freqs.weight`); when set they
    # replace `rope_scaling` (a GGUF of a Llama-3.1 model carries these instead of the formula).
    rope_freq_factors: tuple[float, ...] | None = None

    @property
    def rope_factors(self) -> tuple[float, ...] | None:
        """Divisor per rotary frequency i (len head_dim/2), or None when unscaled."""
        if self.rope_freq_factors is not None:
            return self.rope_freq_factors
        if self.rope_scaling is not None:
            return llama3_freq_factors(self.head_dim, self.rope_theta, self.rope_scaling)
        return None

    def default_feature_layers(self) -> tuple[int, int, int]:
        """EAGLE-3's target features: the inputs of layers 2, N//2 and N-3."""
        n = self.n_layer
        return (2, n // 2, n - 3)


def llama3_freq_factors(head_dim: int, theta: float, s: RopeScaling) -> tuple[float, ...]:
    """Llama-3 RoPE scaling as per-frequency divisors (Meta's `apply_scaling`, the same numbers
    llama.cpp's converter writes to `rope_freqs.weight`): wavelengths shorter than
    original/high_freq_factor are untouched, longer than original/low_freq_factor are divided by
    `factor`, and the band between is interpolated smoothly."""
    low_wavelen = s.original_max_position_embeddings / s.low_freq_factor
    high_wavelen = s.original_max_position_embeddings / s.high_freq_factor
    out = []
    for i in range(0, head_dim, 2):
        freq = 1.0 / theta ** (i / head_dim)
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(s.factor)
        else:
            smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) / (
                s.high_freq_factor - s.low_freq_factor
            )
            out.append(1.0 / ((1 - smooth) / s.factor + smooth))
    return tuple(out)


# --- GGUF ------------------------------------------------------------------------------------


def config_from_gguf(header: Any, rope_freqs: Sequence[float] | None = None) -> LlamaConfig:
    """Build the config from a parsed header (homespec.formats.gguf.GGUFHeader: metadata and
    tensor table). `rope_freqs` is the content of the `rope_freqs.weight` tensor when present."""
    meta: Mapping[str, Any] = header.metadata
    path = header.source or "GGUF file"
    arch = meta.get("general.architecture")
    if arch not in SUPPORTED_ARCHS:
        raise FormatError(
            f"{path}: architecture {arch!r} is not supported by the torch backend",
            hint=f"supported: {', '.join(sorted(SUPPORTED_ARCHS))}; use --backend llamacpp for others",
        )
    tensors = {t.name: t for t in header.tensors}

    def need(key: str) -> Any:
        value = meta.get(f"{arch}.{key}")
        if value is None:
            raise FormatError(f"{path}: GGUF metadata lacks {arch}.{key}", hint="the file may be truncated or not a model")
        return value

    n_embd = int(need("embedding_length"))
    n_head = int(need("attention.head_count"))
    n_head_kv = int(meta.get(f"{arch}.attention.head_count_kv", n_head))
    head_dim = int(meta.get(f"{arch}.attention.key_length") or n_embd // n_head)
    emb = tensors.get("token_embd.weight")
    if emb is None:
        raise FormatError(f"{path}: no token_embd.weight tensor", hint="the file is not a complete model")
    n_vocab = int(meta.get(f"{arch}.vocab_size") or emb.shape[1])  # ggml shape: [n_embd, n_vocab]
    return LlamaConfig(
        arch=arch,
        n_layer=int(need("block_count")),
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim=head_dim,
        n_ff=int(need("feed_forward_length")),
        n_vocab=n_vocab,
        rms_eps=float(need("attention.layer_norm_rms_epsilon")),
        rope_theta=float(meta.get(f"{arch}.rope.freq_base", 10000.0)),
        max_context=int(need("context_length")),
        tied="output.weight" not in tensors,
        qkv_bias="blk.0.attn_q.bias" in tensors,
        o_bias="blk.0.attn_output.bias" in tensors,
        rope_freq_factors=tuple(float(x) for x in rope_freqs) if rope_freqs is not None else None,
    )


def read_gguf_config(path: str | Path) -> LlamaConfig:
    """The config of a GGUF file (header only, plus the tiny rope_freqs tensor when present)."""
    header = read_gguf_header(path)
    rope = next((t for t in header.tensors if t.name == "rope_freqs.weight"), None)
    freqs = None
    if rope is not None:
        import numpy as np

        offset = tensor_offsets(header)["rope_freqs.weight"]
        freqs = np.fromfile(str(path), dtype=np.float32, count=rope.n_elements, offset=offset).tolist()
    return config_from_gguf(header, freqs)


def tensor_offsets(header: Any) -> dict[str, int]:
    """Absolute file offset of every tensor: GGUF packs tensor data in table order, each padded
    to `general.alignment` (the header reader checks the file obeys this)."""
    out: dict[str, int] = {}
    pos = header.data_offset
    for t in header.tensors:
        out[t.name] = pos
        pos += -(-t.n_bytes // header.alignment) * header.alignment
    return out


# --- Hugging Face config.json ------------------------------------------------------------------


def _hf_rope_scaling(cfg: Mapping[str, Any]) -> RopeScaling | None:
    # transformers 4.x writes `rope_scaling`; 5.x `rope_parameters` (which also carries rope_theta)
    rs = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    if not rs:
        return None
    kind = rs.get("rope_type") or rs.get("type")
    if kind in (None, "default"):
        return None
    if kind != "llama3":
        raise FormatError(
            f"rope scaling type {kind!r} is not supported by the torch backend",
            hint="supported: llama3 (and none); use --backend llamacpp",
        )
    return RopeScaling(
        factor=float(rs["factor"]),
        low_freq_factor=float(rs.get("low_freq_factor", 1.0)),
        high_freq_factor=float(rs.get("high_freq_factor", 4.0)),
        original_max_position_embeddings=int(rs.get("original_max_position_embeddings", 8192)),
    )


def config_from_hf(cfg: Mapping[str, Any], path: str = "") -> LlamaConfig:
    """Build the config from a parsed config.json; unknown keys are ignored."""
    model_type = cfg.get("model_type", "llama")
    arch = _HF_ARCHS.get(model_type)
    if arch is None:
        raise FormatError(
            f"{path or 'config.json'}: model_type {model_type!r} is not supported by the torch backend",
            hint="supported: llama, mistral, qwen2",
        )
    n_embd = int(cfg["hidden_size"])
    n_head = int(cfg["num_attention_heads"])
    rope_params = cfg.get("rope_parameters") or {}
    qwen = model_type == "qwen2"
    attention_bias = bool(cfg.get("attention_bias", False))
    return LlamaConfig(
        arch=arch,
        n_layer=int(cfg["num_hidden_layers"]),
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=int(cfg.get("num_key_value_heads") or n_head),
        head_dim=int(cfg.get("head_dim") or n_embd // n_head),
        n_ff=int(cfg["intermediate_size"]),
        n_vocab=int(cfg["vocab_size"]),
        rms_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        rope_theta=float(cfg.get("rope_theta") or rope_params.get("rope_theta") or 10000.0),
        max_context=int(cfg.get("max_position_embeddings", 4096)),
        tied=bool(cfg.get("tie_word_embeddings", False)),
        qkv_bias=qwen or attention_bias,  # Qwen2 always has q/k/v biases
        o_bias=attention_bias and not qwen,
        mlp_bias=bool(cfg.get("mlp_bias", False)),
        rope_scaling=_hf_rope_scaling(cfg),
    )


def read_hf_config(directory: str | Path) -> LlamaConfig:
    if not (Path(directory) / "config.json").exists():
        raise FormatError(f"{directory}: no config.json", hint="pass a Hugging Face model directory or a .gguf file")
    return config_from_hf(load_config(directory), str(directory))
