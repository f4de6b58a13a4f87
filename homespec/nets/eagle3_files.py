"""An EAGLE-3 / EAGLE-3.1 head's files read into numpy, without torch: config, weights in the
published names (homespec.nets.eagle3_config.canonical_key), checked against the config.

Reads every layout homespec loads (homespec/nets/eagle3.py `load_head` reads the same ones into
torch): the published EAGLE-3 layout (`midlayer.*`, homespec's own heads and SafeAILab's), original
checkpoints that name the layer `model.layers.0.*`, and vLLM's speculators layout (`layers.0.*`,
the layer's shape under `transformer_layer_config`), EAGLE-3.0 and 3.1, in model.safetensors,
sharded safetensors or pytorch_model.bin; a head wider than its target ships its own
`embed_tokens.weight`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from homespec.errors import FormatError, UsageError
from homespec.formats.arrays import read_arrays
from homespec.formats.hf import load_config, safetensors_files
from homespec.nets.eagle3_config import Eagle3Config, canonical_key


@dataclass(frozen=True, slots=True)
class HeadFiles:
    directory: Path
    config: Eagle3Config
    tensors: dict[str, np.ndarray]  # published names; floats as stored (BF16 widened to float32)
    layout: str  # "eagle3" (midlayer.*), "eagle3-model" (model.layers.0.*) or "speculators" (layers.0.*)
    files: tuple[Path, ...]  # config.json and the weight files, what the head's identity is made of


def weight_files(directory: Path) -> tuple[Path, ...]:
    """The head's weight files: its safetensors (one or sharded), else pytorch_model.bin."""
    st = safetensors_files(directory)
    if st:
        index = directory / "model.safetensors.index.json"
        return tuple(([index] if index.is_file() else []) + st)
    if (directory / "pytorch_model.bin").is_file():
        return (directory / "pytorch_model.bin",)
    raise UsageError(f"{directory} has no model.safetensors or pytorch_model.bin",
                     hint="download the head's weights next to its config.json")


def head_files(directory: Path) -> tuple[Path, ...]:
    """config.json and the weight files: what names one head's content."""
    return (directory / "config.json", *weight_files(directory))


def expected_shapes(c: Eagle3Config) -> dict[str, tuple[int, ...]]:
    """Every weight the head's graph reads, [out, in] as the checkpoints store them."""
    h, ht, ff = c.hidden_size, c.target_hidden_size, c.intermediate_size
    q, kv = c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim
    out = {
        "fc.weight": (h, 3 * ht), "norm.weight": (h,), "lm_head.weight": (c.draft_vocab_size, h),
        "midlayer.self_attn.q_proj.weight": (q, 2 * h), "midlayer.self_attn.k_proj.weight": (kv, 2 * h),
        "midlayer.self_attn.v_proj.weight": (kv, 2 * h), "midlayer.self_attn.o_proj.weight": (h, q),
        "midlayer.mlp.gate_proj.weight": (ff, h), "midlayer.mlp.up_proj.weight": (ff, h),
        "midlayer.mlp.down_proj.weight": (h, ff), "midlayer.hidden_norm.weight": (h,),
        "midlayer.input_layernorm.weight": (h,), "midlayer.post_attention_layernorm.weight": (h,),
    }
    if c.fc_norm:
        out.update({f"fc_norm.{i}.weight": (ht,) for i in range(3)})
    if c.norm_before_fc:
        out["input_norm.weight"] = (3 * ht,)
    return out


def _layout(raw_keys: list[str], cfg: dict) -> str:
    if cfg.get("speculators_model_type") or any(k.startswith("layers.0.") for k in raw_keys):
        return "speculators"
    if any(k.startswith("model.layers.0.") for k in raw_keys):
        return "eagle3-model"
    return "eagle3"


def read_head(directory: str | Path) -> HeadFiles:
    """Config and weights of the head in `directory`, checked against each other."""
    d = Path(directory)
    cfg = load_config(d)
    config = Eagle3Config.from_dict(cfg, str(d))
    files = weight_files(d)
    raw: dict[str, np.ndarray] = {}
    for f in files:
        if f.suffix != ".json":
            raw.update(read_arrays(f))
    tensors = {canonical_key(k): v for k, v in raw.items()}
    if not config.fc_norm and "fc_norm.0.weight" in tensors:
        config = dataclasses.replace(config, fc_norm=True)  # older configs omit the flag
    for name, shape in expected_shapes(config).items():
        if name not in tensors:
            raise FormatError(f"{d}: the head lacks {name}", hint="is this an EAGLE-3 checkpoint? download it again")
        if tuple(tensors[name].shape) != shape:
            raise FormatError(f"{d}: {name} has shape {tuple(tensors[name].shape)}, the config implies {shape}",
                              hint="config.json and the weights disagree")
    if "d2t" not in tensors:
        if config.draft_vocab_size != config.vocab_size:
            raise FormatError(f"{d}: a reduced draft vocabulary needs d2t", hint="the checkpoint is incomplete")
        tensors["d2t"] = np.zeros(config.draft_vocab_size, np.int64)
    elif tuple(tensors["d2t"].shape) != (config.draft_vocab_size,):
        raise FormatError(f"{d}: d2t has shape {tuple(tensors['d2t'].shape)}, not ({config.draft_vocab_size},)",
                          hint="config.json and the weights disagree")
    emb = tensors.get("embed_tokens.weight")
    if emb is not None and tuple(emb.shape) != (config.vocab_size, config.hidden_size):
        raise FormatError(f"{d}: embed_tokens.weight has shape {tuple(emb.shape)}, not "
                          f"{(config.vocab_size, config.hidden_size)}", hint="config.json and the weights disagree")
    return HeadFiles(d, config, tensors, _layout(list(raw), cfg), (d / "config.json", *files))
