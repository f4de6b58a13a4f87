"""Hugging Face checkpoints: config.json -> ModelSpec, and bounded safetensors header reads.

A safetensors file starts with a u64 (little-endian) header length N and N bytes of JSON:
{"name": {"dtype": "BF16", "shape": [out, in], "data_offsets": [begin, end]}, "__metadata__": {...}}
(huggingface/safetensors README). Reading only that JSON gives exact tensor sizes without
touching the weights.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, replace
from pathlib import Path

from homespec import userfiles
from homespec.errors import FormatError, UsageError
from homespec.formats.families import complete, hf_family_fields
from homespec.quant.names import normalize_quant
from homespec.quant.predict import predict_tensors
from homespec.types import ModelSpec, TensorInfo

_MAX_ST_HEADER = 100 * 1024 * 1024  # the safetensors library refuses larger headers too

# HF `architectures[0]` -> llama.cpp architecture name (convert_hf_to_gguf.py's registrations)
ARCHS = {
    "LlamaForCausalLM": "llama", "MistralForCausalLM": "llama", "MixtralForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3", "Qwen2MoeForCausalLM": "qwen2moe",
    "Qwen3MoeForCausalLM": "qwen3moe", "Gemma2ForCausalLM": "gemma2", "Gemma3ForCausalLM": "gemma3",
    "Gemma3ForConditionalGeneration": "gemma3", "Phi3ForCausalLM": "phi3", "GraniteForCausalLM": "granite",
    "Mistral3ForConditionalGeneration": "llama", "SmolLM3ForCausalLM": "smollm3", "OlmoForCausalLM": "olmo",
    "Olmo2ForCausalLM": "olmo2", "Cohere2ForCausalLM": "cohere2", "Exaone4ForCausalLM": "exaone4",
    "Qwen3NextForCausalLM": "qwen3next", "DeepseekV2ForCausalLM": "deepseek2", "DeepseekV3ForCausalLM": "deepseek2",
    "GptOssForCausalLM": "gpt-oss", "Glm4ForCausalLM": "glm4", "Glm4MoeForCausalLM": "glm4moe",
    "CohereForCausalLM": "command-r",
    "Llama4ForConditionalGeneration": "llama4", "Llama4ForCausalLM": "llama4",
    "Qwen3_5MoeForConditionalGeneration": "qwen35moe", "Qwen3_5ForConditionalGeneration": "qwen35",
}
_DTYPES = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}
_ST_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
             "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8}


@dataclass(frozen=True, slots=True)
class STTensor:
    """One entry of a safetensors header (shape in the file's order: outermost first)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    n_bytes: int
    offset: int = 0  # where its bytes start in the file


def config_path(path: str | os.PathLike) -> Path:
    """A config.json, or a directory holding one; UsageError when neither."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    if not p.is_file():
        raise UsageError(f"no config.json at {path}", hint="pass a Hugging Face model directory or its config.json")
    return p


def load_config(path: str | os.PathLike) -> dict:
    """A config.json (or a directory's), read through homespec.userfiles: bounded, and refused
    unread when it is a FIFO, a device or a directory."""
    p = config_path(path)
    text = userfiles.read_text(str(p), None, userfiles.CONFIG)
    try:
        cfg = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise FormatError(f"{p}: not valid JSON ({' '.join(str(e).split())})",
                          hint="the file is damaged; download it again") from None
    if not isinstance(cfg, dict):
        raise FormatError(f"{p}: expected a JSON object", hint="pass a model's config.json")
    return cfg


def read_safetensors_header(path: str | os.PathLike) -> tuple[STTensor, ...]:
    """The tensor table of one .safetensors file, reading only its JSON header.

    Every reader of safetensors files in homespec goes through here (the planner's sizes, the torch
    backend's weights, EAGLE heads, EXL2 directories), so a damaged file reads the same everywhere.
    It checks what the safetensors library checks, and refuses a file that holds no tensor."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise FormatError(f"{path}: truncated safetensors file", hint="download it again")
            (n,) = struct.unpack("<Q", head)
            if n > min(_MAX_ST_HEADER, size - 8):
                raise FormatError(f"{path}: header claims {n} bytes in a {size}-byte file", hint="download it again")
            raw = f.read(n)
    except OSError as e:
        raise FormatError(f"{path}: cannot read it ({e.strerror or e})", hint="the download is incomplete") from None
    try:
        table = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise FormatError(f"{path}: the safetensors header is not valid JSON", hint="download it again") from None
    if not isinstance(table, dict):
        raise FormatError(f"{path}: the safetensors header is not a JSON object", hint="download it again")
    out, data_len = [], size - 8 - n
    for name, entry in table.items():
        if name == "__metadata__":
            continue
        out.append(_header_entry(path, name, entry, data_len, 8 + n))
    if not out:
        raise FormatError(f"{path}: holds no tensors", hint="the file is empty of weights; download it again")
    return tuple(out)


def _header_entry(path: str | os.PathLike, name: str, entry: object, data_len: int, data_start: int) -> STTensor:
    try:
        begin, end = (int(x) for x in entry["data_offsets"])  # type: ignore[index]
        shape = tuple(int(d) for d in entry["shape"])  # type: ignore[index]
        dtype = str(entry["dtype"])  # type: ignore[index]
    except (KeyError, TypeError, ValueError):
        raise FormatError(f"{path}: bad header entry for {name!r}", hint="download it again") from None
    if not 0 <= begin <= end <= data_len:
        raise FormatError(f"{path}: tensor {name!r} lies outside the file", hint="the download is incomplete")
    n_elements = 1
    for d in shape:
        n_elements *= d
    if dtype in _ST_BYTES and n_elements * _ST_BYTES[dtype] != end - begin:
        raise FormatError(f"{path}: tensor {name!r} holds {end - begin} bytes, not the {n_elements * _ST_BYTES[dtype]} "
                          f"its {dtype} shape {list(shape)} needs", hint="download it again")
    return STTensor(name, dtype, shape, end - begin, data_start + begin)


def safetensors_files(folder: str | os.PathLike) -> list[Path]:
    """A checkpoint's weight files: those model.safetensors.index.json names, else every *.safetensors."""
    root = Path(folder)
    index = root / "model.safetensors.index.json"
    if not index.is_file():
        return sorted(root.glob("*.safetensors"))
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        return [root / name for name in sorted(set(weight_map.values()))]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError):
        raise FormatError(f"{index}: not a safetensors index (no weight_map)", hint="download it again") from None


def safetensors_in(folder: str | os.PathLike) -> tuple[STTensor, ...]:
    """Every tensor of every *.safetensors file in a folder (sharded checkpoints included)."""
    out: list[STTensor] = []
    for f in safetensors_files(folder):
        out += read_safetensors_header(f)
    return tuple(out)


def load_safetensors(path: str | os.PathLike) -> dict:
    """A .safetensors file's tensors as torch tensors {name: Tensor}, checked by
    read_safetensors_header first, so a damaged file gets the same message as in `homespec plan`."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    read_safetensors_header(path)
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, RuntimeError, ValueError) as e:
        raise FormatError(f"{path}: not a readable safetensors file ({e})", hint="download it again") from None


def text_config(cfg: dict) -> dict:
    """Multimodal wrappers (Gemma 3, Mistral 3) nest the language model under text_config."""
    inner = cfg.get("text_config")
    return {**cfg, **inner} if isinstance(inner, dict) else cfg


def hf_arch(cfg: dict) -> str:
    names = cfg.get("architectures") or []
    for n in names:
        if n in ARCHS:
            return ARCHS[n]
    model_type = str(text_config(cfg).get("model_type", ""))
    if model_type:
        return {"mistral": "llama", "gemma3_text": "gemma3"}.get(model_type, model_type)
    raise FormatError(f"config.json names no architecture ({names or 'none'})",
                      hint="pass a causal language model's config.json")


def _swa_layers(c: dict, arch: str, n_layer: int) -> tuple[int, ...]:
    types = c.get("layer_types")
    if isinstance(types, list):
        return tuple(i for i, t in enumerate(types[:n_layer]) if t == "sliding_attention")
    n = int(c.get("sliding_window_pattern") or {"gemma2": 2, "gemma3": 6, "cohere2": 4, "gpt-oss": 2}.get(arch, 0))
    if n == 0:
        return tuple(range(n_layer))
    return tuple(i for i in range(n_layer) if i % n < n - 1)


def model_shape_from_config(cfg: dict, name: str, source: str, fmt: str = "hf") -> ModelSpec:
    """The model's shape from config.json (no tensors yet)."""
    arch = hf_arch(cfg)
    c = text_config(cfg)
    try:
        n_layer, n_embd, n_head = int(c["num_hidden_layers"]), int(c["hidden_size"]), int(c["num_attention_heads"])
        n_vocab = int(c["vocab_size"])
    except (KeyError, TypeError, ValueError) as e:
        raise FormatError(f"{source}: config.json lacks {e}", hint="pass a causal language model's config.json") from None
    head_dim = int(c.get("head_dim") or n_embd // n_head)
    window = c.get("sliding_window")
    if arch == "qwen2" or c.get("use_sliding_window") is False:
        window = None  # Qwen2 configs carry a window they do not use
    rope = c.get("rope_parameters") if isinstance(c.get("rope_parameters"), dict) else {}
    theta = c.get("rope_theta", rope.get("rope_theta"))

    return complete(ModelSpec(
        name=name,
        arch=arch,
        n_layer=n_layer,
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=int(c.get("num_key_value_heads") or n_head),
        head_dim=head_dim,
        n_ff=int(c.get("intermediate_size") or 0),
        n_vocab=n_vocab,
        n_ctx_train=int(c.get("max_position_embeddings") or 0),
        tied_embeddings=bool(c.get("tie_word_embeddings", arch.startswith("gemma"))),
        format=fmt,
        sliding_window=int(window) if window else None,
        swa_layers=_swa_layers(c, arch, n_layer) if window else (),
        rope_theta=float(theta) if theta else None,
        source=source,
        **hf_family_fields(c, arch),
    ))


def gguf_names(arch: str, n_layer: int):
    """HF tensor name -> GGUF tensor name, by the gguf package's own mapping table."""
    import gguf

    by_name = {v: k for k, v in gguf.MODEL_ARCH_NAMES.items()}
    table = gguf.get_tensor_name_map(by_name.get(arch, gguf.MODEL_ARCH.LLAMA), n_layer)

    def convert(name: str) -> str | None:
        return table.get_name(name, try_suffixes=(".weight", ".bias"))

    return convert


def _layer(name: str) -> int | None:
    parts = name.split(".")
    return int(parts[1]) if parts[0] == "blk" and len(parts) > 1 and parts[1].isdigit() else None


def tensors_from_safetensors(model: ModelSpec, entries: tuple[STTensor, ...]) -> tuple[TensorInfo, ...]:
    """Checkpoint tensors renamed to GGUF names, ggml shape order; parts llama.cpp does not load
    (vision towers, MTP heads) have no GGUF name and are left out."""
    convert = gguf_names(model.arch, model.n_layer)
    out = []
    for e in entries:
        name = convert(e.name)
        if name is not None:
            out.append(TensorInfo(name, tuple(reversed(e.shape)), e.dtype, e.n_bytes, _layer(name)))
    return tuple(out)


def with_quant(model: ModelSpec, quant: str) -> ModelSpec:
    """The model with tensors predicted for a GGUF file type or an EXL2 bits-per-weight."""
    q = normalize_quant(quant)
    tensors = predict_tensors(model, q)
    return replace(model, quant=q, tensors=tensors, n_params=sum(t.n_elements for t in tensors))


def model_spec_from_hf_config(path: str | os.PathLike, quant: str | None = None) -> ModelSpec:
    """A ModelSpec from a Hugging Face config.json (or its directory).

    With `quant`, tensors are predicted for that GGUF type / EXL2 bpw. Without, the checkpoint's
    own safetensors headers give exact sizes when present, else its dtype (bf16/f16) is predicted.
    """
    cfg_file = config_path(path)
    folder = cfg_file.parent
    cfg = load_config(cfg_file)
    model = model_shape_from_config(cfg, folder.name or str(folder), str(cfg_file))
    if quant:
        return with_quant(model, quant)
    entries = safetensors_in(folder)
    tensors = tensors_from_safetensors(model, entries) if entries else ()
    if tensors:
        kinds = {t.ggml_type for t in tensors if len(t.shape) >= 2}
        dtype = kinds.pop() if len(kinds) == 1 else "mixed"
        return replace(model, quant=dtype, tensors=tensors, n_params=sum(t.n_elements for t in tensors),
                       tied_embeddings=model.tied_embeddings and "output.weight" not in {t.name for t in tensors})
    dtype = _DTYPES.get(str(text_config(cfg).get("torch_dtype") or text_config(cfg).get("dtype") or "bfloat16"), "BF16")
    return with_quant(model, dtype)
