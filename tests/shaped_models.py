"""Targets with a published model's identity (architecture, layer count, hidden size, vocabulary) and
nothing else of its size: narrow attention (one head), a tiny FFN, Q4_0 weights. `fill="sparse"` leaves
the tensor data as holes in a sparse file (a header that plans like the real model, no disk used);
`fill="random"` writes random Q4_0 blocks a 2-core CPU decodes in tens of milliseconds per token.
The vocabulary is SmolLM2's, padded with llama.cpp's `[PAD{id}]` placeholders to the model's size."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from tiny_models import _default_vocab_source, _tokenizer_fields

Q4_0_BLOCK, Q4_0_BYTES = 32, 18  # ggml: 32 weights in one f16 scale and 16 bytes of nibbles


def _q4_0(rows: int, cols: int, rng: np.random.Generator | None) -> np.ndarray:
    """[rows, cols] Q4_0 as its raw bytes ([rows, cols / 32 * 18]); zeros when rng is None."""
    blocks = np.zeros((rows, cols // Q4_0_BLOCK, Q4_0_BYTES), dtype=np.uint8)
    if rng is not None:
        blocks[..., 0:2] = np.frombuffer(np.float16(0.02).tobytes(), dtype=np.uint8)
        blocks[..., 2:] = rng.integers(0, 256, size=blocks[..., 2:].shape, dtype=np.uint8)
    return blocks.reshape(rows, -1)


def _vocab(n_vocab: int) -> list[tuple[str, object, object, object]]:
    from gguf import GGUFValueType

    fields = []
    for key, value, vtype, sub in _tokenizer_fields(str(_default_vocab_source())):
        if key == "tokenizer.ggml.tokens":
            value = list(value) + [f"[PAD{i}]" for i in range(len(value), n_vocab)]
        elif key == "tokenizer.ggml.token_type":
            value = list(value) + [5] * (n_vocab - len(value))  # 5: UNUSED
        elif key == "tokenizer.ggml.scores" and vtype == GGUFValueType.ARRAY:
            value = list(value) + [0.0] * (n_vocab - len(value))
        fields.append((key, value, vtype, sub))
    return fields


def shaped_gguf(path: str | os.PathLike, *, name: str, arch: str = "llama", n_layer: int, n_embd: int, n_vocab: int,
                head_dim: int = 128, n_ff: int = 64, fill: str = "sparse", seed: int = 0) -> Path:
    """A GGUF named `name` with the identity given; see the module for what `fill` does."""
    from gguf import GGMLQuantizationType, GGUFWriter

    path = Path(path)
    rng = np.random.default_rng(seed) if fill == "random" else None
    w = GGUFWriter(str(path), arch)
    w.add_name(name)
    w.add_block_count(n_layer), w.add_embedding_length(n_embd), w.add_context_length(4096)
    w.add_head_count(1), w.add_head_count_kv(1), w.add_key_length(head_dim), w.add_value_length(head_dim)
    w.add_feed_forward_length(n_ff), w.add_rope_freq_base(10000.0), w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(n_vocab), w.add_file_type(2), w.add_rope_dimension_count(head_dim)  # 2: MOSTLY_Q4_0
    for key, value, vtype, sub in _vocab(n_vocab):
        w.add_key_value(key, value, vtype, sub)
    tensors = [("token_embd.weight", (n_vocab, n_embd))]
    for i in range(n_layer):
        b = f"blk.{i}."
        tensors += [(b + "attn_norm.weight", (n_embd,)), (b + "attn_q.weight", (head_dim, n_embd)),
                    (b + "attn_k.weight", (head_dim, n_embd)), (b + "attn_v.weight", (head_dim, n_embd)),
                    (b + "attn_output.weight", (n_embd, head_dim)), (b + "ffn_norm.weight", (n_embd,)),
                    (b + "ffn_gate.weight", (n_ff, n_embd)), (b + "ffn_up.weight", (n_ff, n_embd)),
                    (b + "ffn_down.weight", (n_embd, n_ff))]
        if arch == "qwen3":
            tensors += [(b + "attn_q_norm.weight", (head_dim,)), (b + "attn_k_norm.weight", (head_dim,))]
    tensors.append(("output_norm.weight", (n_embd,)))
    sizes = []
    for tname, shape in tensors:
        if len(shape) == 1:
            data = np.ones(shape, dtype=np.float32)
            w.add_tensor_info(tname, shape, data.dtype, data.nbytes)
        else:
            nbytes = shape[0] * shape[1] // Q4_0_BLOCK * Q4_0_BYTES
            w.add_tensor_info(tname, (shape[0], shape[1] // Q4_0_BLOCK * Q4_0_BYTES), np.dtype(np.uint8), nbytes,
                              raw_dtype=GGMLQuantizationType.Q4_0)
            data = None
        sizes.append((tname, shape, data))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_ti_data_to_file()
    w.close()
    _write_data(path, sizes, rng)
    return path


def _write_data(path: Path, tensors: list, rng: np.random.Generator | None) -> None:
    """Append the tensor data, each aligned to 32 bytes as gguf's writer lays it out; holes when sparse."""
    with open(path, "r+b") as f:
        f.seek(0, os.SEEK_END)
        pos = -(-f.tell() // 32) * 32
        for _, shape, data in tensors:
            raw = data.tobytes() if data is not None else None
            if raw is None:
                raw_len = shape[0] * shape[1] // Q4_0_BLOCK * Q4_0_BYTES
                if rng is not None:
                    f.seek(pos)
                    f.write(_q4_0(shape[0], shape[1], rng).tobytes())
            else:
                raw_len = len(raw)
                f.seek(pos)
                f.write(raw)
            pos = -(-(pos + raw_len) // 32) * 32
        f.truncate(pos)
