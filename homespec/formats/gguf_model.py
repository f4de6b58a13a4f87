"""GGUF header -> ModelSpec / DraftSpec.

Keys are llama.cpp's (`src/llama-arch.cpp`), prefixed with the architecture name:
`{arch}.block_count`, `.embedding_length`, `.attention.head_count(_kv)` (a number, or one
number per layer), `.attention.key_length` / `.value_length`, `.feed_forward_length`,
`.context_length`, `.attention.sliding_window(_pattern)`, `.rope.freq_base`.
"""

from __future__ import annotations

import os
import urllib.parse
from collections import Counter

from homespec.errors import FormatError
from homespec.formats.families import RECURRENT_ARCHS, family_fields
from homespec.formats.gguf import ArrayInfo, GGUFHeader, file_type_name
from homespec.types import DraftSpec, ModelSpec

# Which layers use the sliding window when a file gives only `sliding_window` (llama.cpp
# `load_swa_pattern(ml, n)` per model: layer il is SWA when il % n < n - 1; dense_first: il % n != 0).
_SWA_PATTERN = {"gemma2": (2, False), "gemma3": (6, False), "gemma3n": (5, False), "gemma-embedding": (6, False),
                "cohere2": (4, False), "gpt-oss": (2, False), "exaone4": (4, False), "llama4": (4, False),
                "olmo2": (4, False), "smallthinker": (4, True)}


def _per_layer(value, n_layer: int, key: str) -> list[int]:
    if isinstance(value, list):
        if len(value) != n_layer:
            raise FormatError(f"{key} has {len(value)} entries for {n_layer} layers", hint="the file is damaged")
        return [int(v) for v in value]
    return [int(value)] * n_layer


def _count(header: GGUFHeader, key: str, required: bool = True) -> int | list | None:
    value = header.metadata.get(key)
    if value is None:
        if required:
            raise FormatError(f"{header.source}: metadata key {key!r} is missing",
                              hint=f"architecture {header.arch!r} is not a transformer homespec can plan for")
        return None
    if isinstance(value, ArrayInfo) or isinstance(value, (str, float)) or (isinstance(value, list) and
                                                                            not all(isinstance(v, int) for v in value)):
        raise FormatError(f"{header.source}: {key} is {value!r}, expected a whole number", hint="the file is damaged")
    return value


def _name(header: GGUFHeader) -> str:
    stem = os.path.basename(urllib.parse.urlsplit(header.source).path or header.source)
    return stem.removesuffix(".gguf") or str(header.metadata.get("general.name", "model"))


def _swa_layers(header: GGUFHeader, arch: str, n_layer: int) -> tuple[int, ...]:
    pattern = header.metadata.get(f"{arch}.attention.sliding_window_pattern")
    if isinstance(pattern, list):  # one bool per layer
        return tuple(i for i, is_swa in enumerate(pattern[:n_layer]) if is_swa)
    n, dense_first = _SWA_PATTERN.get(arch, (0, False))
    if isinstance(pattern, int) and not isinstance(pattern, bool):
        n = pattern
    if n == 0:
        return tuple(range(n_layer))  # llama.cpp: pattern 0 = every layer uses the window
    if dense_first:
        return tuple(i for i in range(n_layer) if i % n != 0)
    return tuple(i for i in range(n_layer) if i % n < n - 1)


def _main_type(header: GGUFHeader) -> str | None:
    """The most common type among 2-D weights, by bytes (for files without general.file_type)."""
    by_type: Counter[str] = Counter()
    for t in header.tensors:
        if len(t.shape) >= 2:
            by_type[t.ggml_type] += t.n_bytes
    return by_type.most_common(1)[0][0] if by_type else None


def model_spec_from_gguf(header: GGUFHeader, name: str | None = None) -> ModelSpec:
    """The target model's shape and exact tensor sizes from its GGUF header."""
    arch = header.arch
    if not arch:
        raise FormatError(f"{header.source}: general.architecture is missing", hint="the file is not a llama.cpp model")
    md = header.metadata
    n_layer_all = int(_count(header, f"{arch}.block_count"))
    n_embd = int(_count(header, f"{arch}.embedding_length"))
    # A header of any architecture is planned from its tensors: a recurrent model (Mamba, RWKV) may
    # have no attention heads at all.
    recurrent = arch in RECURRENT_ARCHS
    heads_raw = _count(header, f"{arch}.attention.head_count", required=not recurrent)
    heads = _per_layer(heads_raw if heads_raw is not None else 0, n_layer_all, "head_count")
    kv_raw = _count(header, f"{arch}.attention.head_count_kv", required=False)
    heads_kv = _per_layer(kv_raw, n_layer_all, "head_count_kv") if kv_raw is not None else heads
    # Per-layer counts (OpenELM, hybrid SSM models with 0 KV heads in recurrent layers): take the
    # largest, which never under-budgets memory.
    n_head, n_head_kv = max(heads, default=0), max(heads_kv, default=0)
    if recurrent and n_head <= 0:
        n_head = n_head_kv = 1  # no attention: the head figures only size an (absent) KV cache
    if n_layer_all <= 0 or n_embd <= 0 or n_head <= 0:
        raise FormatError(f"{header.source}: block_count {n_layer_all}, embedding_length {n_embd}, head_count {n_head}",
                          hint="the file's metadata is damaged")
    family = family_fields(md, arch, n_layer_all, n_embd, heads_kv)
    n_layer = family.pop("n_layer")
    head_dim = int(_count(header, f"{arch}.attention.key_length", required=False) or n_embd // n_head)
    head_dim_v = _count(header, f"{arch}.attention.value_length", required=False)
    ff = _count(header, f"{arch}.feed_forward_length", required=False)
    if ff is None:
        ff = _count(header, f"{arch}.expert_feed_forward_length", required=False) or 0
    n_ff = max(ff) if isinstance(ff, list) else int(ff)
    if family.get("n_expert") and not family.get("n_ff_exp"):
        family["n_ff_exp"] = n_ff // max(1, family.get("n_expert_used") or 1)  # llama.cpp: n_ff / n_expert_used

    names = {t.name: t for t in header.tensors}
    vocab = _count(header, f"{arch}.vocab_size", required=False) or header.array_length("tokenizer.ggml.tokens")
    if not vocab:
        emb = names.get("output.weight") or names.get("token_embd.weight")
        vocab = emb.shape[1] if emb is not None and len(emb.shape) == 2 else 0
    window = _count(header, f"{arch}.attention.sliding_window", required=False)
    if arch == "llama4":  # llama4.cpp: chunked attention over 8192 tokens unless the key says 0
        window = None if window == 0 else 8192
    file_type = md.get("general.file_type")
    quant = file_type_name(file_type) if isinstance(file_type, int) else None
    theta = md.get(f"{arch}.rope.freq_base")
    return ModelSpec(
        name=name or _name(header),
        arch=arch,
        n_layer=n_layer,
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim=head_dim,
        n_ff=n_ff,
        n_vocab=int(vocab),
        n_ctx_train=int(_count(header, f"{arch}.context_length", required=False) or 0),
        tied_embeddings="output.weight" not in names,
        n_params=sum(t.n_elements for t in header.tensors if t.layer is None or t.layer < n_layer),
        quant=quant or _main_type(header),
        format="gguf",
        tensors=header.tensors,
        head_dim_v=int(head_dim_v) if head_dim_v and head_dim_v != head_dim else None,
        sliding_window=int(window) if window else None,
        swa_layers=_swa_layers(header, arch, n_layer) if window else (),
        rope_theta=float(theta) if isinstance(theta, (int, float)) else None,
        source=header.source,
        file_bytes=header.file_size,
        **family,
    )


def target_layers(header: GGUFHeader) -> tuple[int, ...]:
    """The target layers an eagle3 GGUF draws features from (`eagle3.target_layers`)."""
    value = header.metadata.get(f"{header.arch}.target_layers")
    return tuple(int(v) for v in value) if isinstance(value, list) else ()


def draft_spec_from_gguf(header: GGUFHeader) -> DraftSpec:
    """An EAGLE-3 head in llama.cpp's native `eagle3` architecture (`src/models/eagle3.cpp`)."""
    if header.arch != "eagle3":
        raise FormatError(f"{header.source}: architecture {header.arch!r} is not an EAGLE-3 head",
                          hint="pass an eagle3 GGUF, or use the file as a draft model")
    body = model_spec_from_gguf(header)
    names = {t.name: t for t in header.tensors}
    fc = names.get("fc.weight")
    if fc is None or len(fc.shape) != 2:
        raise FormatError(f"{header.source}: the eagle3 file has no 2-D fc.weight", hint="the file is damaged")
    hidden = header.metadata.get("eagle3.target_hidden_size")
    target_hidden = int(hidden) if isinstance(hidden, int) and hidden > 0 else fc.shape[0] // 3
    # llama.cpp: draft vocab = d2t length when present, else the target's vocabulary
    d2t, out, emb = names.get("d2t"), names.get("output.weight"), names.get("token_embd.weight")
    vocab = header.metadata.get("eagle3.vocab_size") or header.array_length("tokenizer.ggml.tokens") or 0
    target_vocab = emb.shape[1] if emb is not None and len(emb.shape) == 2 else int(vocab)  # 0: unknown
    draft_vocab = d2t.shape[0] if d2t is not None else (out.shape[1] if out is not None else target_vocab)
    weights = [t for t in header.tensors if len(t.shape) >= 2]
    dtype = Counter(t.ggml_type for t in weights).most_common(1)[0][0].lower() if weights else "f32"
    window = header.metadata.get("homespec.draft_window")  # written by homespec's head conversion
    return DraftSpec(
        name=body.name,
        kind="eagle3",
        target="",
        n_layer=body.n_layer,
        n_embd=body.n_embd,
        n_head=body.n_head,
        n_head_kv=body.n_head_kv,
        head_dim=body.head_dim,
        n_ff=body.n_ff,
        draft_vocab=int(draft_vocab),
        target_vocab=int(target_vocab),
        target_hidden=target_hidden,
        weight_bytes=header.tensor_bytes,  # llama.cpp loads every tensor, its own token_embd included
        dtype=dtype,
        fc_norm=bool(header.metadata.get("eagle3.norm_before_fc", False)),
        source=header.source,
        tensors=header.tensors,
        window=window if isinstance(window, int) and window > 0 else None,
    )
