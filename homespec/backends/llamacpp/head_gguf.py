"""An EAGLE-3 / EAGLE-3.1 head as a GGUF of llama.cpp's `eagle3` architecture, from numpy arrays
(no torch), written as llama.cpp's own converter writes one (vendor/llama.cpp/conversion/llama.py
in llama-cpp-python 0.3.36), plus the EAGLE-3.1 keys and tensor of homespec's patch
(kernels/llamacpp/eagle3.1.patch). docs/interop.md lists every key and tensor.

* metadata: the Llama keys under the `eagle3.` prefix (block_count 1, embedding/ff lengths, head
  counts, rope base and dimension, RMS eps, vocab_size = the target's vocabulary), plus
  `eagle3.target_layers` (the three target layers whose inputs the head reads, default
  [2, N//2, N-3]), `eagle3.target_hidden_size`, `eagle3.norm_before_residual`,
  `eagle3.norm_before_fc`; with the patch's EAGLE-3.1 features `eagle3.fc_norm` and
  `eagle3.norm_output` (written only when true: a 3.0 head's file is what upstream writes); the
  tokenizer is the target's (every `tokenizer.*` key copied); `homespec.draft_window` and
  `homespec.draft_sinks` carry the head's attention window for a drafter that applies it;
* tensors: `midlayer.*` renamed as layer 0 of a Llama (`blk.0.attn_norm` = input_layernorm,
  `blk.0.attn_norm_2` = hidden_norm, attn_q/k/v/output, ffn_norm/gate/up/down), q and k rows
  permuted from Hugging Face's half-split rotation to llama.cpp's interleaved one, `fc.weight`,
  `fc_norm.weight` ([H_t, 3] in ggml order: the three per-feature RMSNorm weights, EAGLE-3.1),
  `enc.output_norm.weight` (input_norm, only with norm_before_fc), `output_norm` (norm),
  `output` (lm_head), `token_embd` (only for a head that ships its own), `rope_freqs` for llama3
  rope scaling, and `d2t` as int64 *absolute* target ids (the checkpoint's offsets plus the draft
  id); t2d is not written (llama.cpp never reads it);
* 1-D tensors in F32; matrices in f32, f16, bf16 or q8_0 (gguf-py's quantizer; a matrix whose rows
  are not a multiple of q8_0's 32-element block stays f16).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from homespec.atomic import write_with
from homespec.errors import FormatError, UsageError
from homespec.formats.gguf import ArrayInfo, read_gguf_header
from homespec.nets.config import llama3_freq_factors

if TYPE_CHECKING:
    from homespec.nets.eagle3_config import Eagle3Config

ARCH = "eagle3"
MARK_KEY = "homespec.head"  # what homespec's files carry, so a later export may replace one
WINDOW_KEY = "homespec.draft_window"  # the head's attention window (its training length), when it has one
SINKS_KEY = "homespec.draft_sinks"  # entries at the start that stay visible with the window
DRAFT_SINKS = 4  # homespec.speculative.drafters.eagle3.Eagle3Drafter's default
FC_NORM_KEY = f"{ARCH}.fc_norm"  # EAGLE-3.1, homespec's patch
NORM_OUTPUT_KEY = f"{ARCH}.norm_output"  # EAGLE-3.1, homespec's patch
DTYPES = ("f32", "f16", "bf16", "q8_0")
_FILE_TYPES = {"f32": 0, "f16": 1, "q8_0": 7, "bf16": 32}  # llama_ftype: ALL_F32, MOSTLY_F16, _Q8_0, _BF16
LAYER_NAMES = {  # published EAGLE-3 names -> llama.cpp's
    "midlayer.input_layernorm.weight": "blk.0.attn_norm.weight",
    "midlayer.hidden_norm.weight": "blk.0.attn_norm_2.weight",
    "midlayer.self_attn.q_proj.weight": "blk.0.attn_q.weight",
    "midlayer.self_attn.k_proj.weight": "blk.0.attn_k.weight",
    "midlayer.self_attn.v_proj.weight": "blk.0.attn_v.weight",
    "midlayer.self_attn.o_proj.weight": "blk.0.attn_output.weight",
    "midlayer.post_attention_layernorm.weight": "blk.0.ffn_norm.weight",
    "midlayer.mlp.gate_proj.weight": "blk.0.ffn_gate.weight",
    "midlayer.mlp.up_proj.weight": "blk.0.ffn_up.weight",
    "midlayer.mlp.down_proj.weight": "blk.0.ffn_down.weight",
    "fc.weight": "fc.weight",
    "input_norm.weight": "enc.output_norm.weight",
    "norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
    "embed_tokens.weight": "token_embd.weight",
}


@dataclass(frozen=True, slots=True)
class TargetHeader:
    """What an eagle3 GGUF takes from its target: depth, width, vocabulary and tokenizer."""

    path: Path
    arch: str
    n_layer: int
    n_embd: int
    n_vocab: int
    tokenizer: tuple[tuple[str, Any, Any, Any], ...]  # (key, value, type, sub_type) of tokenizer.*


# the tokenizer's arrays longer than homespec's header reader keeps by default
TOKENIZER_ARRAYS = ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type",
                    "tokenizer.ggml.merges", "tokenizer.ggml.added_tokens", "tokenizer.ggml.precompiled_charsmap")


def read_target(path: str | os.PathLike[str]) -> TargetHeader:
    """The target GGUF's depth, width, vocabulary and every tokenizer.* key with its GGUF type, from
    homespec's bounded header reader (no weights are read)."""
    from gguf import GGUFValueType

    p = Path(path)
    if not p.is_file():
        raise UsageError(f"target {p} is not a file", hint="pass the target's GGUF with --target")
    header = read_gguf_header(p, keep_arrays=TOKENIZER_ARRAYS)
    meta = header.metadata
    arch = meta.get("general.architecture")
    n_layer, n_embd = meta.get(f"{arch}.block_count"), meta.get(f"{arch}.embedding_length")
    tokens = meta.get("tokenizer.ggml.tokens")
    if not arch or n_layer is None or n_embd is None or not isinstance(tokens, list) or not tokens:
        raise FormatError(f"{p}: no block_count, embedding_length or tokenizer in its header",
                          hint="pass the target model's own GGUF with --target")
    tok = []
    for key, value in meta.items():
        if not key.startswith("tokenizer."):
            continue
        if isinstance(value, ArrayInfo):
            raise FormatError(f"{p}: its tokenizer key {key} is an array homespec does not copy",
                              hint="report this with the target's name")
        vtype, etype = header.value_types[key]
        tok.append((key, value, GGUFValueType(vtype), None if etype is None else GGUFValueType(etype)))
    return TargetHeader(p, str(arch), int(n_layer), int(n_embd), len(tokens), tuple(tok))


def permute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """Rows of a q or k projection [n_head*d, in] from HF's half-split rotary layout (pairs i and
    i + d/2 rotate together) to the interleaved one llama.cpp's NORM rope reads (pairs 2i, 2i+1)."""
    rows, cols = w.shape
    d = rows // n_head
    return w.reshape(n_head, 2, d // 2, cols).swapaxes(1, 2).reshape(rows, cols)


def _matrix(a: np.ndarray, dtype: str) -> tuple[np.ndarray, Any]:
    """A 2-D float32 array in `dtype`: (array, raw GGML type or None for numpy's own)."""
    from gguf import GGMLQuantizationType
    from gguf.quants import quantize

    if dtype == "f32":
        return np.ascontiguousarray(a, np.float32), None
    if dtype == "q8_0" and a.shape[-1] % 32 == 0:
        return quantize(np.ascontiguousarray(a, np.float32), GGMLQuantizationType.Q8_0), GGMLQuantizationType.Q8_0
    if dtype == "bf16":
        return quantize(np.ascontiguousarray(a, np.float32), GGMLQuantizationType.BF16), GGMLQuantizationType.BF16
    return a.astype(np.float16), None


def gguf_tensors(c: "Eagle3Config", tensors: Mapping[str, np.ndarray], dtype: str) -> list[tuple[str, np.ndarray, Any]]:
    """(GGUF name, array, raw GGML type or None) of every tensor the eagle3 loader reads."""
    from gguf import GGMLQuantizationType

    out: list[tuple[str, np.ndarray, Any]] = []
    for key, gname in LAYER_NAMES.items():
        if key not in tensors or (key == "input_norm.weight" and not c.norm_before_fc):
            continue
        a = np.asarray(tensors[key], np.float32)
        if key.endswith("q_proj.weight"):
            a = permute_qk(a, c.num_attention_heads)
        elif key.endswith("k_proj.weight"):
            a = permute_qk(a, c.num_key_value_heads)
        out.append((gname, np.ascontiguousarray(a), None) if a.ndim == 1 else (gname, *_matrix(a, dtype)))
    if c.fc_norm:  # numpy [3, H_t] = ggml [H_t, 3]: one RMSNorm weight per target feature
        w = np.stack([np.asarray(tensors[f"fc_norm.{i}.weight"], np.float32) for i in range(3)])
        out.append(("fc_norm.weight", np.ascontiguousarray(w), None))
    if c.rope_scaling is not None:
        factors = llama3_freq_factors(c.head_dim, c.rope_theta, c.rope_scaling)
        out.append(("rope_freqs.weight", np.asarray(factors, np.float32), None))
    absolute = np.arange(c.draft_vocab_size, dtype=np.int64) + np.asarray(tensors["d2t"]).astype(np.int64)
    if absolute.min() < 0 or absolute.max() >= c.vocab_size or np.unique(absolute).size != absolute.size:
        raise FormatError("the head's d2t maps draft ids outside the target vocabulary or twice",
                          hint="the head's checkpoint is damaged; train or download it again")
    out.append(("d2t", absolute, GGMLQuantizationType.I64))
    return out


def write_eagle3_gguf(c: "Eagle3Config", tensors: Mapping[str, np.ndarray], target: TargetHeader, out: Path, *,
                      dtype: str, name: str) -> int:
    """Write the head (`c`, published-name `tensors`) to `out` atomically; returns the file's size."""
    from gguf import GGUFWriter

    if dtype not in _FILE_TYPES:
        raise UsageError(f"unknown draft dtype {dtype!r}", hint=f"use one of: {', '.join(DTYPES)}")
    arrays = gguf_tensors(c, tensors, dtype)

    def write(tmp: str) -> None:
        w = GGUFWriter(tmp, ARCH)
        add_eagle3_keys(w, c, target, dtype=dtype, name=name)
        for tname, array, raw in arrays:
            w.add_tensor(tname, array, raw_dtype=raw)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()

    write_with(out, write)
    return out.stat().st_size


def add_eagle3_keys(w: Any, c: "Eagle3Config", target: TargetHeader, *, dtype: str, name: str) -> None:
    """Every metadata key of the head's file (the module docstring lists them) into GGUFWriter `w`."""
    w.add_name(name)
    w.add_string(MARK_KEY, name)
    w.add_block_count(1)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_rope_freq_base(c.rope_theta)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_file_type(_FILE_TYPES[dtype])
    w.add_vocab_size(c.vocab_size)
    w.add_rope_dimension_count(c.head_dim)
    if c.head_dim * c.num_attention_heads != c.hidden_size:
        w.add_key_length(c.head_dim)
        w.add_value_length(c.head_dim)
    w.add_array(f"{ARCH}.target_layers", [int(i) for i in c.feature_layers(target.n_layer)])
    w.add_uint32(f"{ARCH}.target_hidden_size", c.target_hidden_size)
    w.add_bool(f"{ARCH}.norm_before_residual", c.norm_before_residual)
    w.add_bool(f"{ARCH}.norm_before_fc", c.norm_before_fc)
    if c.fc_norm:
        w.add_bool(FC_NORM_KEY, True)
    if c.norm_output:
        w.add_bool(NORM_OUTPUT_KEY, True)
    if c.draft_window is not None:
        w.add_uint32(WINDOW_KEY, c.draft_window)
        w.add_uint32(SINKS_KEY, DRAFT_SINKS)
    for key, value, vtype, sub in target.tokenizer:
        w.add_key_value(key, value, vtype, sub)
