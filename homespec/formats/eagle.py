"""EAGLE-3 draft heads in the published checkpoint layout (SafeAILab/EAGLE, speculators).

config.json is Llama-style with `num_hidden_layers: 1` and `draft_vocab_size`; weights are
`fc.weight [H, 3*H_t]`, `midlayer.*` (one decoder layer whose q/k/v read 2H), `norm.weight`,
`lm_head.weight [draft_vocab, H]`, `d2t [draft_vocab]`, `t2d [target_vocab]`. EAGLE-3.1 adds
`fc_norm.{0,1,2}.weight` (one RMSNorm per captured feature) and the `norm_output` flag.
Red Hat's speculators format nests the layer shape under `transformer_layer_config`.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

from homespec.errors import FormatError, UsageError
from homespec.formats.acceptance import read_records
from homespec.formats.hf import config_path, load_config, read_safetensors_header
from homespec.types import DraftSpec, TensorInfo

_EMBED = ("embed_tokens.weight", "model.embed_tokens.weight")  # the target's, when a head ships a copy
_DTYPES = {"bfloat16": "bf16", "float16": "f16", "float32": "f32"}


def is_eagle_config(cfg: dict) -> bool:
    arch = " ".join(cfg.get("architectures") or []).lower()
    return ("eagle" in arch or "draft_vocab_size" in cfg or "eagle_config" in cfg
            or str(cfg.get("speculators_model_type", "")).lower().startswith("eagle"))


def _bin_bytes(path: Path) -> int:
    """Bytes of the tensor storages in a torch zip checkpoint, without unpickling it (no torch)."""
    try:
        with zipfile.ZipFile(path) as z:
            return sum(i.file_size for i in z.infolist() if "/data/" in i.filename)
    except zipfile.BadZipFile:
        raise FormatError(f"{path}: not a torch zip checkpoint", hint="re-save it with torch.save or as safetensors") from None


def draft_spec_from_checkpoint(path: str | os.PathLike) -> DraftSpec:
    """A DraftSpec from an EAGLE-3 head's directory (or its config.json) and weight file headers."""
    cfg_file = config_path(path)
    folder = cfg_file.parent
    cfg = load_config(cfg_file)
    if not is_eagle_config(cfg):
        raise UsageError(f"{folder} is not an EAGLE-3 head (no draft_vocab_size / eagle_config in config.json)",
                         hint="pass an EAGLE-3 checkpoint directory, a GGUF, or a catalogue draft name")
    layer = cfg.get("transformer_layer_config") if isinstance(cfg.get("transformer_layer_config"), dict) else cfg
    try:
        n_embd, n_head = int(layer["hidden_size"]), int(layer["num_attention_heads"])
        n_ff = int(layer["intermediate_size"])
        target_vocab = int(layer.get("vocab_size") or cfg["vocab_size"])
    except (KeyError, TypeError, ValueError) as e:
        raise FormatError(f"{cfg_file}: missing {e}", hint="the head's config.json is incomplete") from None
    n_head_kv = int(layer.get("num_key_value_heads") or n_head)
    head_dim = int(layer.get("head_dim") or n_embd // n_head)
    draft_vocab = int(cfg.get("draft_vocab_size") or target_vocab)
    target_hidden = int(cfg.get("target_hidden_size") or layer.get("target_hidden_size") or n_embd)
    dtype = _DTYPES.get(str(cfg.get("torch_dtype") or layer.get("torch_dtype") or "bfloat16"), "bf16")

    tensors: tuple[TensorInfo, ...] | None = None
    st = folder / "model.safetensors"
    shards = sorted(folder.glob("*.safetensors"))
    if st.is_file() or shards:
        entries = [e for f in (shards or [st]) for e in read_safetensors_header(f)]
        tensors = tuple(TensorInfo(e.name, tuple(reversed(e.shape)), e.dtype, e.n_bytes)
                        for e in entries if e.name not in _EMBED)
        by_name = {t.name: t for t in tensors}
        # the weights are the truth where config.json and they disagree
        if "fc.weight" in by_name and len(by_name["fc.weight"].shape) == 2:
            target_hidden = by_name["fc.weight"].shape[0] // 3
        if "d2t" in by_name:
            draft_vocab = by_name["d2t"].shape[0]
        elif "lm_head.weight" in by_name:
            draft_vocab = by_name["lm_head.weight"].shape[1]
        if "t2d" in by_name:
            target_vocab = by_name["t2d"].shape[0]
        if "fc.weight" in by_name:
            dtype = by_name["fc.weight"].ggml_type.lower()
        weight_bytes = sum(t.n_bytes for t in tensors)
        fc_norm = any(t.name.startswith("fc_norm.") for t in tensors) or bool(cfg.get("fc_norm"))
    elif (folder / "pytorch_model.bin").is_file():
        weight_bytes = _bin_bytes(folder / "pytorch_model.bin")
        fc_norm = bool(cfg.get("fc_norm"))
    else:
        raise UsageError(f"{folder} has no model.safetensors or pytorch_model.bin",
                         hint="download the head's weights next to its config.json")
    norm_output = bool(cfg.get("norm_output"))
    return DraftSpec(
        name=folder.name,
        kind="eagle3.1" if fc_norm or norm_output else "eagle3",
        target=str(cfg.get("target_model", "") or ""),
        n_layer=int(layer.get("num_hidden_layers") or 1),
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim=head_dim,
        n_ff=n_ff,
        draft_vocab=draft_vocab,
        target_vocab=target_vocab,
        target_hidden=target_hidden,
        weight_bytes=weight_bytes,
        dtype=dtype,
        fc_norm=fc_norm,
        norm_output=norm_output,
        source=str(folder),
        tensors=tensors,
        acceptance=read_records(folder),  # homespec's own heads record their acceptance beside config.json
        window=int(cfg["draft_window"]) if cfg.get("draft_window") else None,
    )


def feature_layers(path: str | os.PathLike) -> tuple[int, ...]:
    """Target layers the head was trained on, when its config overrides the [2, N//2, N-3] default."""
    cfg = load_config(path)
    for holder in (cfg.get("eagle_config"), cfg):
        if isinstance(holder, dict) and isinstance(holder.get("eagle_aux_hidden_state_layer_ids"), list):
            return tuple(int(i) for i in holder["eagle_aux_hidden_state_layer_ids"])
    return ()
