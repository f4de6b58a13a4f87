"""EXL2 (exllamav2) model directories: config.json + quantised *.safetensors.

An EXL2 linear layer `model.layers.N.self_attn.q_proj` is stored as `.q_weight` (int32, packed
rows: [in x bits / 32, out]), `.q_scale`, `.q_scale_max`, `.q_groups`, `.q_invperm` (int16 or
int32, one entry per input feature) and an optional `.q_perm` / `.bias` (exllamav2
`exllamav2/linear.py`). The header gives every part's exact size, so the bits per weight are
recomputed here from what is on disk: bpw = 8 x (bytes of all the layer's parts) / (in x out),
with in = len(q_invperm) and out = q_weight's second dimension. The lm_head has its own
`head_bits` and is left out of the average, as exllamav2's own bpw figure leaves it out.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

from homespec.errors import FormatError, UsageError
from homespec.formats.hf import (STTensor, config_path, gguf_names, load_config, model_shape_from_config,
                                 safetensors_in)
from homespec.types import ModelSpec, TensorInfo

_PARTS = ("q_weight", "q_scale", "q_scale_max", "q_groups", "q_invperm", "q_perm", "bias")


def is_exl2_config(cfg: dict) -> bool:
    q = cfg.get("quantization_config")
    return isinstance(q, dict) and str(q.get("quant_method", "")).lower() == "exl2"


def _modules(entries: tuple[STTensor, ...]) -> tuple[dict[str, dict[str, STTensor]], list[STTensor]]:
    """Group `<module>.<part>` entries by quantised module; the rest are plain tensors."""
    quantised = {e.name.rsplit(".", 1)[0] for e in entries if e.name.endswith(".q_weight")}
    modules: dict[str, dict[str, STTensor]] = defaultdict(dict)
    plain = []
    for e in entries:
        prefix, _, part = e.name.rpartition(".")
        if prefix in quantised and part in _PARTS:
            modules[prefix][part] = e
        else:
            plain.append(e)
    return modules, plain


def model_spec_from_exl2_dir(path: str | os.PathLike) -> ModelSpec:
    """A ModelSpec with exact per-tensor bytes and the measured bits per weight ("EXL2-4.65")."""
    cfg_file = config_path(path)
    folder = cfg_file.parent
    cfg = load_config(cfg_file)
    if not is_exl2_config(cfg):
        raise UsageError(f"{folder} is not an EXL2 model (no quantization_config with quant_method exl2)",
                         hint="pass an exllamav2-converted model directory")
    entries = safetensors_in(folder)
    if not entries:
        raise FormatError(f"{folder}: no *.safetensors files", hint="the download is incomplete: fetch the model's *.safetensors files")
    model = model_shape_from_config(cfg, folder.name, str(folder), fmt="exl2")
    convert = gguf_names(model.arch, model.n_layer)
    modules, plain = _modules(entries)

    tensors: list[TensorInfo] = []
    body_bytes = body_weights = 0
    for prefix, parts in modules.items():
        if "q_invperm" not in parts or len(parts["q_weight"].shape) != 2:
            raise FormatError(f"{folder}: EXL2 layer {prefix} lacks q_invperm or a 2-D q_weight",
                              hint="the conversion is incomplete or from an unknown exllamav2 version")
        n_in, n_out = parts["q_invperm"].shape[0], parts["q_weight"].shape[1]
        n_bytes = sum(p.n_bytes for p in parts.values())
        name = convert(prefix + ".weight") or prefix + ".weight"
        layer = int(name.split(".")[1]) if name.startswith("blk.") else None
        tensors.append(TensorInfo(name, (n_in, n_out), "EXL2", n_bytes, layer))
        if name != "output.weight":
            body_bytes += n_bytes
            body_weights += n_in * n_out
    for e in plain:
        name = convert(e.name)
        if name is not None:
            layer = int(name.split(".")[1]) if name.startswith("blk.") else None
            tensors.append(TensorInfo(name, tuple(reversed(e.shape)), e.dtype, e.n_bytes, layer))
    if not body_weights:
        raise FormatError(f"{folder}: no EXL2-quantised layers found", hint="the model is not an EXL2 conversion")
    bpw = 8 * body_bytes / body_weights
    return replace(
        model,
        name=Path(folder).name,
        quant=f"EXL2-{bpw:.2f}",
        tensors=tuple(tensors),
        n_params=sum(t.n_elements for t in tensors),
        tied_embeddings=model.tied_embeddings and not any(t.name == "output.weight" for t in tensors),
    )
