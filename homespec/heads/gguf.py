"""An EAGLE-3 head as a GGUF of llama.cpp's `eagle3` architecture, written as llama.cpp's own
converter writes one (vendor/llama.cpp/conversion/llama.py in llama-cpp-python 0.3.36).

What the converter does, and so what this writes (docs/interop.md cites the lines):
* metadata: the Llama keys under the `eagle3.` prefix (block_count 1, embedding/ff lengths, head
  counts, rope base and dimension, RMS eps, vocab_size = the target's vocabulary), plus
  `eagle3.target_layers` (the three target layers whose inputs the head reads, default
  [2, N//2, N-3]), `eagle3.target_hidden_size`, `eagle3.norm_before_residual` and
  `eagle3.norm_before_fc`; the tokenizer is the target's (every `tokenizer.*` key copied);
* tensors: `midlayer.*` renamed as layer 0 of a Llama (`blk.0.attn_norm` = input_layernorm,
  `blk.0.attn_norm_2` = hidden_norm, attn_q/k/v/output, ffn_norm/gate/up/down), q and k rows
  permuted from Hugging Face's half-split rotation to llama.cpp's interleaved one, `fc.weight`,
  `enc.output_norm.weight` (input_norm, only with norm_before_fc), `output_norm` (norm),
  `output` (lm_head), `rope_freqs` for llama3 rope scaling, and `d2t` as int64 *absolute* target
  ids (the checkpoint's offsets plus the draft id); t2d is not written (llama.cpp never reads it);
* 1-D tensors in F32, matrices in the head's own float type.

llama.cpp's graph (src/models/eagle3.cpp) has no per-feature fc_norm and feeds the next draft
step the *pre-norm* output, so an EAGLE-3.1 head (fc_norm, norm_output) is refused here: export
its EAGLE-3 twin instead (homespec/heads/twin.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from homespec.errors import FormatError, HomespecError, UsageError

if TYPE_CHECKING:
    from homespec.nets.eagle3 import Eagle3Config, Eagle3Head

ARCH = "eagle3"
MARK_KEY = "homespec.head"  # what an exported file carries, so a later export may replace it
_FILE_TYPES = {"f32": 0, "f16": 1, "bf16": 32}  # llama_ftype: ALL_F32, MOSTLY_F16, MOSTLY_BF16
_LAYER = {  # homespec (published EAGLE-3) names -> llama.cpp's, for layer 0
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


def read_target(path: str | os.PathLike[str]) -> TargetHeader:
    """The target GGUF's header (gguf.GGUFReader maps the file; no weights are read)."""
    from gguf import GGUFReader, GGUFValueType

    p = Path(path)
    if not p.is_file():
        raise UsageError(f"target {p} is not a file", hint="pass the target's GGUF with --target")
    try:
        reader = GGUFReader(str(p))
    except (ValueError, OSError) as exc:
        raise FormatError(f"{p}: not a readable GGUF ({exc})", hint="pass the target's GGUF with --target") from None

    def field(key: str) -> Any:
        f = reader.fields.get(key)
        return None if f is None else f.contents()

    arch = field("general.architecture")
    n_layer, n_embd = field(f"{arch}.block_count"), field(f"{arch}.embedding_length")
    tokens = field("tokenizer.ggml.tokens")
    if not arch or n_layer is None or n_embd is None or not tokens:
        raise FormatError(f"{p}: no block_count, embedding_length or tokenizer in its header",
                          hint="pass the target model's own GGUF with --target")
    tok = []
    for key, f in reader.fields.items():
        if key.startswith("tokenizer."):
            vtype = f.types[0]
            tok.append((key, f.contents(), vtype, f.types[1] if vtype == GGUFValueType.ARRAY else None))
    return TargetHeader(p, str(arch), int(n_layer), int(n_embd), len(tokens), tuple(tok))


def unsupported(config: "Eagle3Config") -> list[str]:
    """What of this head llama.cpp's eagle3 graph cannot run, one reason each (empty: exportable)."""
    return _reasons(config.fc_norm, config.norm_output)


def _reasons(fc_norm: bool, norm_output: bool) -> list[str]:
    out = []
    if fc_norm:
        out.append("fc_norm (one RMSNorm per target feature; llama.cpp's norm_before_fc normalises the "
                   "three together)")
    if norm_output:
        out.append("norm_output (llama.cpp feeds the next draft step the pre-norm output)")
    return out


def refuse_31(fc_norm: bool, norm_output: bool, head_dir: str) -> None:
    """The one-line refusal of an EAGLE-3.1 head, from its config alone (before weights load)."""
    reasons = _reasons(fc_norm, norm_output)
    if reasons:
        raise UsageError(f"{head_dir} is an EAGLE-3.1 head and llama.cpp's eagle3 graph lacks "
                         f"{' and '.join(reasons)}",
                         hint="add --eagle3-twin to export its EAGLE-3 twin (docs/interop.md says what it changes)")


def check_overwrite(out: Path, force: bool, is_ours: Callable[[Path], bool]) -> None:
    """Refuse to replace something homespec did not write, unless --force."""
    if not out.exists() or force:
        return
    if not is_ours(out):
        raise UsageError(f"{out} exists and was not written by homespec draft export",
                         hint="pick another --out, or add --force to replace it")


def is_exported_gguf(path: Path) -> bool:
    if not path.is_file():
        return False
    try:
        from gguf import GGUFReader

        return MARK_KEY in GGUFReader(str(path)).fields
    except (ValueError, OSError):
        return False


def permute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """Rows of a q or k projection [n_head*d, in] from HF's half-split rotary layout (pairs i and
    i + d/2 rotate together) to the interleaved one llama.cpp's NORM rope reads (pairs 2i, 2i+1)."""
    rows, cols = w.shape
    d = rows // n_head
    return w.reshape(n_head, 2, d // 2, cols).swapaxes(1, 2).reshape(rows, cols)


def head_tensors(head: "Eagle3Head", dtype: str) -> list[tuple[str, np.ndarray, Any]]:
    """(GGUF name, array, raw GGML type or None) of every tensor the eagle3 loader reads."""
    from gguf import GGMLQuantizationType

    import torch

    c = head.config
    out: list[tuple[str, np.ndarray, Any]] = []
    for key, t in head.state_dict().items():
        if key in ("d2t", "t2d") or key.startswith("fc_norm."):
            continue
        a = t.detach().float().cpu().numpy()
        if key.endswith(("q_proj.weight",)):
            a = permute_qk(a, c.num_attention_heads)
        elif key.endswith("k_proj.weight"):
            a = permute_qk(a, c.num_key_value_heads)
        if a.ndim == 1 or dtype == "f32":
            out.append((_LAYER[key], np.ascontiguousarray(a, np.float32), None))
        elif dtype == "f16":
            out.append((_LAYER[key], a.astype(np.float16), None))
        else:  # bf16: numpy has none; its bit pattern as uint16, typed by raw_dtype
            bits = torch.from_numpy(a).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
            out.append((_LAYER[key], bits, GGMLQuantizationType.BF16))
    if c.rope_scaling is not None:
        from homespec.nets.config import llama3_freq_factors

        factors = llama3_freq_factors(c.head_dim, c.rope_theta, c.rope_scaling)
        out.append(("rope_freqs.weight", np.asarray(factors, np.float32), None))
    absolute = np.arange(c.draft_vocab_size, dtype=np.int64) + head.d2t.cpu().numpy().astype(np.int64)
    if absolute.min() < 0 or absolute.max() >= c.vocab_size or np.unique(absolute).size != absolute.size:
        raise FormatError("the head's d2t maps draft ids outside the target vocabulary or twice",
                          hint="the head's checkpoint is damaged; train or download it again")
    out.append(("d2t", absolute, GGMLQuantizationType.I64))
    return out


def write_eagle3_gguf(head: "Eagle3Head", target: TargetHeader, out: Path, *, dtype: str, name: str) -> int:
    """Write `head` to `out` atomically; returns the file's size in bytes."""
    from gguf import GGUFWriter

    from homespec.atomic import write_with

    c = head.config
    if unsupported(c):
        raise HomespecError(f"llama.cpp cannot run {', '.join(unsupported(c))}", hint="export the head's EAGLE-3 twin")
    if dtype not in _FILE_TYPES:
        raise UsageError(f"unknown dtype {dtype!r}", hint=f"use one of: {', '.join(_FILE_TYPES)}")
    tensors = head_tensors(head, dtype)
    layers = [int(i) for i in c.feature_layers(target.n_layer)]

    def write(tmp: str) -> None:
        w = GGUFWriter(tmp, ARCH)
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
        w.add_array(f"{ARCH}.target_layers", layers)
        w.add_uint32(f"{ARCH}.target_hidden_size", c.target_hidden_size)
        w.add_bool(f"{ARCH}.norm_before_residual", c.norm_before_residual)
        w.add_bool(f"{ARCH}.norm_before_fc", c.norm_before_fc)
        for key, value, vtype, sub in target.tokenizer:
            w.add_key_value(key, value, vtype, sub)
        for tname, array, raw in tensors:
            w.add_tensor(tname, array, raw_dtype=raw)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()

    write_with(out, write)
    return out.stat().st_size
