"""Random-weight GGUFs shaped like Llama-3.1-8B at Q4_K_M and its EAGLE-3 head, for the GPU check's
cost measurements (scripts/gpu_check.sh, docs/gpu.md, "The 8B figures"): a pass reads every weight once
whatever values they hold, so its cost follows from the shapes and types alone.

    python benchmarks/gpu/shaped.py vocab MODEL.gguf OUT.gguf       the tokenizer of MODEL alone (prepare, on the CPU)
    python benchmarks/gpu/shaped.py models VOCAB.gguf DIR [--shape 8b|tiny]   DIR/target.gguf and DIR/head.gguf

* target: the catalogue's `llama-3.1-8b` at Q4_K_M with the tensor types homespec predicts for llama.cpp's
  quantiser (homespec.quant.predict: Q4_K; Q6_K for attn_v and ffn_down of the use_more_bits layers and for
  output); `tiny` shrinks every width for the CPU dry run (the same code path, milliseconds per pass);
* head: the catalogue's `eagle3-llama3.1-8b` shapes (yuhuili/EAGLE3-LLaMA3.1-Instruct-8B's config.json), its
  matrices in q8_0 (homespec's default --draft-dtype), d2t the first draft-vocabulary ids of the target; its
  metadata written by homespec.backends.llamacpp.head_gguf, as every head homespec converts;
* vocabulary: the embedded SmolLM2's tokenizer (VOCAB.gguf, made by `vocab`: 49,152 tokens with their merges
  and chat template) padded with llama.cpp's `[PAD{id}]` placeholders to the model's 128,256.

Every block is written directly, never quantised from floats: random quants with scales bounded so a weight
stays within about +-0.1 (no inf or NaN anywhere, activations bounded over 32 layers). A pattern of a few
MiB of valid blocks is repeated through each tensor, so 4.9 GB is written at the disk's speed. No torch.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

TARGET_ID, HEAD_ID = "llama-3.1-8b", "eagle3-llama3.1-8b"
FILE_TYPE_Q4_K_M = 15  # llama_ftype LLAMA_FTYPE_MOSTLY_Q4_K_M
# (offset, fp16 value) of each block's scale fields: weight = d * q (+ m) within about +-0.1
SCALES: dict[str, tuple[tuple[int, float], ...]] = {
    "Q4_0": ((0, 0.01),), "Q4_1": ((0, 0.005), (2, -0.04)), "Q5_0": ((0, 0.003),), "Q5_1": ((0, 0.003), (2, -0.05)),
    "Q8_0": ((0, 3e-4),),
    # d * sc * q - dmin * m with 6-bit sc, m and 4- or 5-bit q: d 1e-4 -> |d sc q| <= 0.095 (Q4_K)
    "Q4_K": ((0, 1e-4), (2, 7.5e-4)), "Q5_K": ((0, 5e-5), (2, 7.5e-4)),
    "Q6_K": ((208, 1e-4),),  # d * scale * (q - 32), scale an int8 kept within +-16 (below)
}
Q6_K_SCALES = slice(192, 208)
PATTERN_BLOCKS = 1 << 15


@dataclasses.dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int, ...]  # ggml order: ne0 (the row length) first
    ggml_type: str  # "Q4_K", "F32", "I64", ...
    data: np.ndarray | None = None  # explicit contents (1-D tensors, d2t); None: random blocks


# --- shapes -------------------------------------------------------------------------------------


def target_spec(shape: str) -> Any:
    """The catalogue's Llama-3.1-8B at Q4_K_M, or its tiny twin (same layer kinds, small widths)."""
    from homespec.catalog import load_catalog
    from homespec.quant.predict import predict_tensors

    spec = load_catalog().model(f"{TARGET_ID}-q4_k_m")
    if shape == "tiny":
        small = dataclasses.replace(spec, name="tiny-llama", n_layer=4, n_embd=256, n_head=4, n_head_kv=2,
                                    head_dim=64, n_ff=512, n_vocab=50176, tensors=None)
        spec = dataclasses.replace(small, tensors=predict_tensors(small, "Q4_K_M"))
    return spec


def head_config(shape: str, target: Any) -> Any:
    """The catalogue's Llama-3.1-8B head as an Eagle3Config (tiny: the target's tiny widths)."""
    from homespec.catalog import load_catalog
    from homespec.nets.eagle3_config import Eagle3Config

    d = load_catalog().draft(HEAD_ID)
    cfg = {"hidden_size": d.n_embd, "num_attention_heads": d.n_head, "num_key_value_heads": d.n_head_kv,
           "head_dim": d.head_dim, "intermediate_size": d.n_ff, "vocab_size": d.target_vocab,
           "draft_vocab_size": d.draft_vocab, "target_hidden_size": d.target_hidden, "rms_norm_eps": 1e-5,
           "rope_theta": 500000.0, "max_position_embeddings": 2048}
    if shape == "tiny":
        cfg.update(hidden_size=target.n_embd, num_attention_heads=target.n_head, num_key_value_heads=target.n_head_kv,
                   head_dim=target.head_dim, intermediate_size=target.n_ff, vocab_size=target.n_vocab,
                   draft_vocab_size=4096, target_hidden_size=target.n_embd)
    return Eagle3Config.from_dict(cfg)


def head_tensors(c: Any) -> list[Tensor]:
    """The eagle3 graph's tensors under llama.cpp's names: matrices q8_0, norms F32 ones, d2t absolute ids."""
    from homespec.backends.llamacpp.head_gguf import LAYER_NAMES
    from homespec.nets.eagle3_files import expected_shapes

    out = []
    for key, shape in expected_shapes(c).items():
        ggml_shape = tuple(reversed(shape))
        if len(shape) == 1:
            out.append(Tensor(LAYER_NAMES[key], ggml_shape, "F32", np.ones(shape, np.float32)))
        else:
            out.append(Tensor(LAYER_NAMES[key], ggml_shape, "Q8_0"))
    d2t = np.arange(c.draft_vocab_size, dtype=np.int64)  # draft id i is target id i
    out.append(Tensor("d2t", (c.draft_vocab_size,), "I64", d2t))
    return out


def target_tensors(spec: Any) -> list[Tensor]:
    out = []
    for t in spec.tensors:
        if len(t.shape) == 1:
            out.append(Tensor(t.name, t.shape, "F32", np.ones(t.shape, np.float32)))
        else:
            out.append(Tensor(t.name, t.shape, t.ggml_type))
    return out


# --- blocks -------------------------------------------------------------------------------------


def block_pattern(ggml_type: str, rng: np.random.Generator) -> np.ndarray:
    """PATTERN_BLOCKS valid blocks of `ggml_type` as bytes: random quants, bounded fp16 scales."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    _, type_size = GGML_QUANT_SIZES[GGMLQuantizationType[ggml_type]]
    blocks = rng.integers(0, 256, size=(PATTERN_BLOCKS, type_size), dtype=np.uint8)
    for offset, value in SCALES[ggml_type]:
        blocks[:, offset:offset + 2] = np.frombuffer(np.float16(value).tobytes(), np.uint8)
    if ggml_type == "Q6_K":
        blocks[:, Q6_K_SCALES] = rng.integers(-16, 17, size=(PATTERN_BLOCKS, 16), dtype=np.int8).view(np.uint8)
    return blocks.reshape(-1)


def n_bytes(t: Tensor) -> int:
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    if t.data is not None:
        return t.data.nbytes
    block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType[t.ggml_type]]
    n = int(np.prod(t.shape))
    if t.shape[0] % block:
        raise SystemExit(f"error: {t.name}: rows of {t.shape[0]} are not a multiple of {t.ggml_type}'s {block}")
    return n // block * type_size


def write_gguf(path: Path, arch: str, keys: Any, tensors: Sequence[Tensor], seed: int) -> int:
    """Header (keys(writer) adds the metadata) and tensor infos by gguf's writer, then the data
    streamed: each tensor aligned as the writer lays it out, random ones as a repeated pattern."""
    from gguf import GGMLQuantizationType, GGUFWriter

    tmp = path.with_name(path.name + ".tmp")
    w = GGUFWriter(str(tmp), arch)
    keys(w)
    for t in tensors:
        raw = GGMLQuantizationType[t.ggml_type]
        if t.data is not None:
            w.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes)  # F32 or I64 from the dtype
        else:
            rows = int(np.prod(t.shape[1:]))
            w.add_tensor_info(t.name, (rows, n_bytes(t) // rows), np.dtype(np.uint8), n_bytes(t), raw_dtype=raw)
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_ti_data_to_file()
    w.close()
    align, rng, patterns = w.data_alignment, np.random.default_rng(seed), {}
    with open(tmp, "r+b") as f:
        f.seek(0, os.SEEK_END)
        pos = -(-f.tell() // align) * align
        for t in tensors:
            f.seek(pos)
            if t.data is not None:
                f.write(t.data.tobytes())
            else:
                pattern = patterns.setdefault(t.ggml_type, block_pattern(t.ggml_type, rng))
                left = n_bytes(t)
                while left:
                    n = min(left, pattern.nbytes)
                    f.write(pattern[:n].data)
                    left -= n
            pos = -(-(pos + n_bytes(t)) // align) * align
        f.truncate(pos)
    tmp.replace(path)
    return path.stat().st_size


# --- the vocabulary -------------------------------------------------------------------------------


def tokenizer_fields(path: str) -> list[tuple[str, Any, Any, Any]]:
    """(key, value, type, sub_type) of every tokenizer.* field of a GGUF."""
    from gguf import GGUFReader, GGUFValueType

    out = []
    for key, field in GGUFReader(path).fields.items():
        if key.startswith("tokenizer."):
            vtype = field.types[0]
            out.append((key, field.contents(), vtype, field.types[1] if vtype == GGUFValueType.ARRAY else None))
    return out


def padded(fields: list[tuple[str, Any, Any, Any]], n_vocab: int) -> list[tuple[str, Any, Any, Any]]:
    """The tokenizer grown to n_vocab tokens with llama.cpp's [PAD{id}] placeholders (type 5: unused)."""
    out = []
    for key, value, vtype, sub in fields:
        if key == "tokenizer.ggml.tokens":
            if len(value) > n_vocab:
                raise SystemExit(f"error: the vocabulary has {len(value)} tokens, more than the model's {n_vocab}")
            value = list(value) + [f"[PAD{i}]" for i in range(len(value), n_vocab)]
        elif key == "tokenizer.ggml.token_type":
            value = list(value) + [5] * (n_vocab - len(value))
        elif key == "tokenizer.ggml.scores" and isinstance(value, list):
            value = list(value) + [0.0] * (n_vocab - len(value))
        out.append((key, value, vtype, sub))
    return out


def write_vocab(model: str, out: Path) -> int:
    """A GGUF holding MODEL's tokenizer keys alone (no tensors): what `models` builds its vocabulary from."""
    from gguf import GGUFWriter

    w = GGUFWriter(str(out), "llama")
    for key, value, vtype, sub in tokenizer_fields(model):
        w.add_key_value(key, value, vtype, sub)
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_ti_data_to_file()
    w.close()
    return out.stat().st_size


# --- the two files ---------------------------------------------------------------------------------


def target_keys(spec: Any, vocab: list[tuple[str, Any, Any, Any]]) -> Any:
    def keys(w: Any) -> None:
        w.add_name(spec.name)
        w.add_block_count(spec.n_layer), w.add_context_length(spec.n_ctx_train), w.add_embedding_length(spec.n_embd)
        w.add_feed_forward_length(spec.n_ff), w.add_head_count(spec.n_head), w.add_head_count_kv(spec.n_head_kv)
        w.add_key_length(spec.head_dim), w.add_value_length(spec.head_dim), w.add_rope_dimension_count(spec.head_dim)
        w.add_rope_freq_base(spec.rope_theta or 10000.0), w.add_layer_norm_rms_eps(1e-5)
        w.add_vocab_size(spec.n_vocab), w.add_file_type(FILE_TYPE_Q4_K_M)
        for key, value, vtype, sub in padded(vocab, spec.n_vocab):
            w.add_key_value(key, value, vtype, sub)
    return keys


def make_models(vocab_path: str, out: Path, shape: str, seed: int = 0) -> dict[str, Any]:
    from homespec.backends.llamacpp.head_gguf import add_eagle3_keys, read_target

    out.mkdir(parents=True, exist_ok=True)
    spec = target_spec(shape)
    t0 = time.perf_counter()
    target = out / "target.gguf"
    size = write_gguf(target, "llama", target_keys(spec, tokenizer_fields(vocab_path)), target_tensors(spec), seed)
    c = head_config(shape, spec)
    head = out / "head.gguf"
    keys = lambda w: add_eagle3_keys(w, c, read_target(target), dtype="q8_0", name=f"random {HEAD_ID}")  # noqa: E731
    head_size = write_gguf(head, "eagle3", keys, head_tensors(c), seed + 1)
    return {"shape": shape, "target": str(target), "target_bytes": size, "target_model": spec.name,
            "head": str(head), "head_bytes": head_size, "head_model": HEAD_ID, "seconds": round(time.perf_counter() - t0, 2)}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("vocab", help="write MODEL's tokenizer alone to OUT")
    v.add_argument("model"), v.add_argument("out", type=Path)
    m = sub.add_parser("models", help="write DIR/target.gguf and DIR/head.gguf")
    m.add_argument("vocab"), m.add_argument("out", type=Path)
    m.add_argument("--shape", choices=("8b", "tiny"), default="8b")
    m.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    if a.cmd == "vocab":
        print(f"{a.out}: {write_vocab(a.model, a.out)} bytes")
        return 0
    if not Path(a.vocab).is_file():
        print(f"error: no vocabulary file {a.vocab}\nhint: make it with `python benchmarks/gpu/shaped.py vocab MODEL.gguf OUT.gguf`", file=sys.stderr)
        return 2
    info = make_models(a.vocab, a.out, a.shape, a.seed)
    print(f"{info['target']}: {info['target_bytes'] / 2**30:.2f} GiB ({info['target_model']}); "
          f"{info['head']}: {info['head_bytes'] / 2**20:.1f} MiB ({info['head_model']}); {info['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
