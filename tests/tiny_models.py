"""Tiny random-weight Llama-family models for tests: a GGUF that llama.cpp loads and a Hugging Face
directory that transformers loads, both holding the same weights.

The weights are born in Hugging Face layout; the GGUF writer applies llama.cpp's q/k row
permutation exactly as its HF->GGUF converter does, so loading both must give the same model.
The GGUF carries the real SmolLM2 tokenizer (gpt2 BPE, 49152 tokens, merges, chat template).
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from homespec.nets.config import RopeScaling, llama3_freq_factors

_FTYPES_DIRECT = {"F32": 0, "F16": 1}  # llama_ftype values written without quantising


def _default_vocab_source() -> Path:
    from homespec.embedded import smollm2_path

    return smollm2_path()


@functools.lru_cache(maxsize=4)
def _tokenizer_fields(vocab_from: str) -> tuple[tuple[str, Any, Any, Any], ...]:
    """(key, value, type, sub_type) of every tokenizer.* field of a GGUF, read once per process."""
    from gguf import GGUFReader, GGUFValueType

    reader = GGUFReader(vocab_from)
    out = []
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        sub = field.types[1] if vtype == GGUFValueType.ARRAY else None
        out.append((key, field.contents(), vtype, sub))
    return tuple(out)


def _n_vocab(vocab_from: str) -> int:
    for key, value, _, _ in _tokenizer_fields(vocab_from):
        if key == "tokenizer.ggml.tokens":
            return len(value)
    raise ValueError(f"{vocab_from} has no tokenizer.ggml.tokens")


def tiny_weights(
    *,
    n_layer: int = 4,
    n_embd: int = 64,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 128,
    n_vocab: int = 49152,
    tied: bool = True,
    qkv_bias: bool = False,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Seeded float32 weights in Hugging Face naming and layout ([out, in] matrices).

    Embeddings (and lm_head) have unit-variance entries so logits spread over several units.
    Projections are scaled `gain`/sqrt(fan_in): with plain 1/sqrt(fan_in) a tied model mostly
    predicts its input token again, because the token's own embedding dominates the residual
    stream. Larger o/down outputs (gain 5) let the context dominate, so greedy continuations
    vary with the prompt (4-17 distinct tokens in 24 greedy steps instead of 1-2). Sharper q/k
    would vary them more but makes fp32 softmax noise exceed 1e-4 against transformers.
    """
    rng = np.random.default_rng(seed)
    head_dim = n_embd // n_head

    def lin(out_f: int, in_f: int, gain: float = 1.0) -> np.ndarray:
        return (gain * rng.standard_normal((out_f, in_f)) / np.sqrt(in_f)).astype(np.float32)

    def norm(n: int) -> np.ndarray:
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    w: dict[str, np.ndarray] = {"model.embed_tokens.weight": rng.standard_normal((n_vocab, n_embd)).astype(np.float32)}
    for i in range(n_layer):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = norm(n_embd)
        w[p + "self_attn.q_proj.weight"] = lin(n_head * head_dim, n_embd)
        w[p + "self_attn.k_proj.weight"] = lin(n_head_kv * head_dim, n_embd)
        w[p + "self_attn.v_proj.weight"] = lin(n_head_kv * head_dim, n_embd)
        w[p + "self_attn.o_proj.weight"] = lin(n_embd, n_head * head_dim, 5.0)
        if qkv_bias:
            w[p + "self_attn.q_proj.bias"] = (0.5 * rng.standard_normal(n_head * head_dim)).astype(np.float32)
            w[p + "self_attn.k_proj.bias"] = (0.5 * rng.standard_normal(n_head_kv * head_dim)).astype(np.float32)
            w[p + "self_attn.v_proj.bias"] = (0.5 * rng.standard_normal(n_head_kv * head_dim)).astype(np.float32)
        w[p + "post_attention_layernorm.weight"] = norm(n_embd)
        w[p + "mlp.gate_proj.weight"] = lin(n_ff, n_embd)
        w[p + "mlp.up_proj.weight"] = lin(n_ff, n_embd)
        w[p + "mlp.down_proj.weight"] = lin(n_embd, n_ff, 5.0)
    w["model.norm.weight"] = norm(n_embd)
    if not tied:
        w["lm_head.weight"] = rng.standard_normal((n_vocab, n_embd)).astype(np.float32)
    return w


def permute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's converter permutation (`LlamaModel.permute`): within each head, rows
    [x0..x_{d/2-1}, y0..y_{d/2-1}] become [x0, y0, x1, y1, ...] so that its rope (adjacent pairs)
    rotates the same pairs as HF's rotate_half."""
    shape = w.shape
    return w.reshape(n_head, 2, shape[0] // n_head // 2, *shape[1:]).swapaxes(1, 2).reshape(shape)


def _hf_rope_scaling_dict(rope_scaling: RopeScaling | None) -> dict[str, Any] | None:
    if rope_scaling is None:
        return None
    return {
        "rope_type": "llama3",
        "factor": rope_scaling.factor,
        "low_freq_factor": rope_scaling.low_freq_factor,
        "high_freq_factor": rope_scaling.high_freq_factor,
        "original_max_position_embeddings": rope_scaling.original_max_position_embeddings,
    }


def make_tiny_gguf(
    path: str | os.PathLike,
    *,
    n_layer: int = 4,
    n_embd: int = 64,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 128,
    tied: bool = True,
    seed: int = 0,
    ftype: str = "F32",
    arch: str = "llama",
    vocab_from: str | os.PathLike | None = None,
    qkv_bias: bool = False,
    rope_theta: float = 10000.0,
    rope_scaling: RopeScaling | None = None,
    n_ctx_train: int = 2048,
) -> Path:
    """Write a random-weight GGUF (F32/F16 directly; other ftypes via llama.cpp's quantizer)."""
    from gguf import GGUFWriter

    path = Path(path)
    vocab_from = str(vocab_from or _default_vocab_source())
    ftype = ftype.upper()
    if ftype not in _FTYPES_DIRECT:
        f32 = path.with_name(path.stem + ".f32.gguf")
        make_tiny_gguf(
            f32, n_layer=n_layer, n_embd=n_embd, n_head=n_head, n_head_kv=n_head_kv, n_ff=n_ff, tied=tied,
            seed=seed, ftype="F32", arch=arch, vocab_from=vocab_from, qkv_bias=qkv_bias, rope_theta=rope_theta,
            rope_scaling=rope_scaling, n_ctx_train=n_ctx_train,
        )
        _quantize(f32, path, ftype)
        f32.unlink()
        return path

    head_dim = n_embd // n_head
    w = tiny_weights(
        n_layer=n_layer, n_embd=n_embd, n_head=n_head, n_head_kv=n_head_kv, n_ff=n_ff,
        n_vocab=_n_vocab(vocab_from), tied=tied, qkv_bias=qkv_bias, seed=seed,
    )
    permute = arch in ("llama", "mistral")
    half = ftype == "F16"

    def mat(a: np.ndarray) -> np.ndarray:
        return a.astype(np.float16) if half else a  # 1-D tensors (norms, biases) stay F32, as llama.cpp writes them

    tmp = path.with_name(path.name + ".tmp")
    writer = GGUFWriter(str(tmp), arch)
    writer.add_name(f"tiny-{arch}-{n_layer}x{n_embd}-s{seed}")
    writer.add_block_count(n_layer)
    writer.add_context_length(n_ctx_train)
    writer.add_embedding_length(n_embd)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(rope_theta)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(w["model.embed_tokens.weight"].shape[0])
    writer.add_file_type(_FTYPES_DIRECT[ftype])
    for key, value, vtype, sub in _tokenizer_fields(vocab_from):
        writer.add_key_value(key, value, vtype, sub)

    writer.add_tensor("token_embd.weight", mat(w["model.embed_tokens.weight"]))
    if rope_scaling is not None:
        # what the converter writes for a Llama-3.1 checkpoint instead of scaling metadata
        factors = llama3_freq_factors(head_dim, rope_theta, rope_scaling)
        writer.add_tensor("rope_freqs.weight", np.asarray(factors, dtype=np.float32))
    names = {
        "input_layernorm.weight": "attn_norm.weight",
        "self_attn.q_proj.weight": "attn_q.weight",
        "self_attn.k_proj.weight": "attn_k.weight",
        "self_attn.v_proj.weight": "attn_v.weight",
        "self_attn.o_proj.weight": "attn_output.weight",
        "self_attn.q_proj.bias": "attn_q.bias",
        "self_attn.k_proj.bias": "attn_k.bias",
        "self_attn.v_proj.bias": "attn_v.bias",
        "post_attention_layernorm.weight": "ffn_norm.weight",
        "mlp.gate_proj.weight": "ffn_gate.weight",
        "mlp.up_proj.weight": "ffn_up.weight",
        "mlp.down_proj.weight": "ffn_down.weight",
    }
    for i in range(n_layer):
        for hf, gg in names.items():
            a = w.get(f"model.layers.{i}.{hf}")
            if a is None:
                continue
            if permute and hf.startswith(("self_attn.q_proj", "self_attn.k_proj")):
                a = permute_qk(a, n_head if "q_proj" in hf else n_head_kv)
            writer.add_tensor(f"blk.{i}.{gg}", mat(a) if a.ndim == 2 else a)
    writer.add_tensor("output_norm.weight", w["model.norm.weight"])
    if not tied:
        writer.add_tensor("output.weight", mat(w["lm_head.weight"]))
    return finish_gguf(writer, tmp, path)


def finish_gguf(writer: Any, tmp: Path, path: Path) -> Path:
    """Write out a GGUFWriter that was opened on `tmp`, then move the file to `path` in one step
    (a half-written model never stands under the real name)."""
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(tmp, path)
    return path


def _quantize(src: Path, dst: Path, ftype: str) -> None:
    import llama_cpp

    value = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{ftype}", None)
    if value is None:
        raise ValueError(f"unknown llama.cpp file type {ftype}")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = value
    params.nthread = 2
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), llama_cpp.byref(params))
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize({ftype}) returned {rc}")


def make_tiny_hf_dir(
    path: str | os.PathLike,
    *,
    n_layer: int = 4,
    n_embd: int = 64,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 128,
    tied: bool = True,
    seed: int = 0,
    n_vocab: int | None = None,
    vocab_from: str | os.PathLike | None = None,
    qkv_bias: bool = False,
    rope_theta: float = 10000.0,
    rope_scaling: RopeScaling | None = None,
    n_ctx_train: int = 2048,
    tokenizer: bool = True,
) -> Path:
    """Write config.json + model.safetensors (+ tokenizer.json/tokenizer_config.json built from the
    SmolLM2 GGUF's vocabulary) with the same weights `make_tiny_gguf` writes for these arguments.

    `qkv_bias=True` writes a Qwen2 config (biases on q/k/v only), else a Llama config.
    `n_vocab` (without a tokenizer) makes a faster, smaller model for pure-numerics tests.
    """
    from safetensors.numpy import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    if n_vocab is None:
        vocab_src = str(vocab_from or _default_vocab_source())
        n_vocab = _n_vocab(vocab_src)
    else:
        tokenizer = False
    w = tiny_weights(
        n_layer=n_layer, n_embd=n_embd, n_head=n_head, n_head_kv=n_head_kv, n_ff=n_ff,
        n_vocab=n_vocab, tied=tied, qkv_bias=qkv_bias, seed=seed,
    )
    cfg: dict[str, Any] = {
        "architectures": ["Qwen2ForCausalLM" if qkv_bias else "LlamaForCausalLM"],
        "model_type": "qwen2" if qkv_bias else "llama",
        "hidden_size": n_embd,
        "intermediate_size": n_ff,
        "num_hidden_layers": n_layer,
        "num_attention_heads": n_head,
        "num_key_value_heads": n_head_kv,
        "head_dim": n_embd // n_head,
        "vocab_size": n_vocab,
        "rms_norm_eps": 1e-5,
        "rope_theta": rope_theta,
        "max_position_embeddings": n_ctx_train,
        "tie_word_embeddings": tied,
        "hidden_act": "silu",
        "attention_bias": False,
        "torch_dtype": "float32",
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    if rope_scaling is not None:
        cfg["rope_scaling"] = _hf_rope_scaling_dict(rope_scaling)
    tensors = dict(w)
    _atomic_write(path / "config.json", json.dumps(cfg, indent=2).encode())
    tmp = path / "model.safetensors.tmp"
    save_file(tensors, str(tmp), metadata={"format": "pt"})
    os.replace(tmp, path / "model.safetensors")
    if tokenizer:
        write_hf_tokenizer(path, vocab_src)
    return path


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_hf_tokenizer(directory: str | os.PathLike, vocab_from: str | os.PathLike) -> None:
    """tokenizer.json + tokenizer_config.json equivalent to a gpt2-BPE GGUF's "smollm" vocabulary:
    digits split one by one, then GPT-2 byte-level pre-tokenisation, no prefix space."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from tokenizers import AddedToken

    fields = {k: v for k, v, _, _ in _tokenizer_fields(str(vocab_from))}
    tokens: list[str] = fields["tokenizer.ggml.tokens"]
    types: list[int] = fields["tokenizer.ggml.token_type"]
    merges = [tuple(m.split(" ", 1)) for m in fields["tokenizer.ggml.merges"]]
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
    )
    tok.decoder = decoders.ByteLevel()
    control = [AddedToken(t, special=True, normalized=False) for t, ty in zip(tokens, types) if ty == 3]  # 3 = CONTROL
    tok.add_special_tokens(control)
    directory = Path(directory)
    tmp = directory / "tokenizer.json.tmp"
    tok.save(str(tmp))
    os.replace(tmp, directory / "tokenizer.json")
    bos = tokens[int(fields.get("tokenizer.ggml.bos_token_id", 1))]
    eos = tokens[int(fields.get("tokenizer.ggml.eos_token_id", 2))]
    tcfg = {
        "tokenizer_class": "GPT2Tokenizer",
        "bos_token": bos,
        "eos_token": eos,
        "add_bos_token": bool(fields.get("tokenizer.ggml.add_bos_token", False)),
        "chat_template": fields.get("tokenizer.chat_template"),
        "model_max_length": 8192,
    }
    _atomic_write(directory / "tokenizer_config.json", json.dumps(tcfg, indent=2).encode())


def write_word_tokenizer(directory: str | os.PathLike, n_vocab: int) -> None:
    """A word-level tokenizer.json of `n_vocab` tokens "t0" .. "tN-1" (split on whitespace): what a
    small-vocabulary model directory needs to generate, without the SmolLM2 GGUF as a vocabulary
    source. EOS comes from config.json's eos_token_id."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(n_vocab)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    directory = Path(directory)
    tmp = directory / "tokenizer.json.tmp"
    tok.save(str(tmp))
    os.replace(tmp, directory / "tokenizer.json")
