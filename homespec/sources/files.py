"""A model or a draft named by a file, a directory or a URL: its shapes, read by homespec.formats.

homespec.sources.resolve imports this module on the first name that is no catalogue name, so that
`homespec plan` on a catalogue name loads no file format.
"""

from __future__ import annotations

from pathlib import Path

from homespec.errors import UsageError
from homespec.formats.eagle import draft_spec_from_checkpoint, is_eagle_config
from homespec.formats.exl2 import is_exl2_config, model_spec_from_exl2_dir
from homespec.formats.gguf import read_model_header
from homespec.formats.gguf_model import draft_spec_from_gguf, model_spec_from_gguf
from homespec.formats.hf import load_config, model_spec_from_hf_config
from homespec.types import DraftSpec, ModelSpec


def _is_gguf_file(path: Path) -> bool:
    if path.suffix.lower() == ".gguf":
        return True
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"GGUF"
    except OSError:
        return False


def _gguf_header(arg: str):
    return read_model_header(arg)  # every part of a split model


def _no_quant_for_files(quant: str | None, what: str, has: str | None) -> None:
    if quant:
        raise UsageError(f"--quant {quant} does not apply to {what}: it is already {has or 'quantised'}",
                         hint="drop --quant, or pass a catalogue name or a Hugging Face config.json to choose one")


def model_from_gguf(arg: str, quant: str | None) -> ModelSpec:
    """The target model in a GGUF file or at a GGUF URL (its header, read by range)."""
    header = _gguf_header(arg)
    if header.arch == "eagle3":
        raise UsageError(f"{arg} is an EAGLE-3 draft head, not a target model", hint="pass it as --draft")
    spec = model_spec_from_gguf(header)
    _no_quant_for_files(quant, arg, spec.quant)
    return spec


def _model_from_dir_or_config(path: Path, quant: str | None) -> ModelSpec:
    cfg = load_config(path)
    if is_eagle_config(cfg):
        raise UsageError(f"{path} is an EAGLE-3 draft head, not a target model", hint="pass it as --draft")
    if is_exl2_config(cfg):
        spec = model_spec_from_exl2_dir(path)
        _no_quant_for_files(quant, str(path), spec.quant)
        return spec
    return model_spec_from_hf_config(path, quant)


def model_from_path(path: Path, quant: str | None) -> ModelSpec:
    """The target model in an existing file or directory: a GGUF, a config.json, an HF or EXL2 directory."""
    if path.is_dir():
        if (path / "config.json").is_file():
            return _model_from_dir_or_config(path, quant)
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) == 1:
            return model_from_gguf(str(ggufs[0]), quant)
        if ggufs:
            raise UsageError(f"{path} holds {len(ggufs)} GGUF files", hint="pass one of them: " +
                             ", ".join(g.name for g in ggufs[:4]))
        raise UsageError(f"{path} is not a model directory (no config.json, no .gguf file)",
                         hint="pass a .gguf file, a Hugging Face / EXL2 model directory, or a catalogue name")
    if _is_gguf_file(path):
        return model_from_gguf(str(path), quant)
    if path.suffix.lower() == ".json":
        return _model_from_dir_or_config(path, quant)
    raise UsageError(f"{path} is not a model file (neither GGUF nor config.json)",
                     hint="pass a .gguf file, a Hugging Face / EXL2 model directory, or a catalogue name")


def draft_from_model(model: ModelSpec) -> DraftSpec:
    """A small model used whole as the draft (classic speculative decoding)."""
    weights = sum(t.n_bytes for t in model.tensors) if model.tensors else 0
    return DraftSpec(
        name=model.name, kind="model", target="", n_layer=model.n_layer, n_embd=model.n_embd,
        n_head=model.n_head, n_head_kv=model.n_head_kv, head_dim=model.head_dim, n_ff=model.n_ff,
        draft_vocab=model.n_vocab, target_vocab=model.n_vocab, target_hidden=model.n_embd,
        weight_bytes=weights, dtype=(model.quant or "").lower(), source=model.source, tensors=model.tensors,
        model=model,
    )


def draft_from_gguf(arg: str) -> DraftSpec:
    """The draft in a GGUF file or at a GGUF URL: an EAGLE-3 head, or a small model used whole."""
    header = _gguf_header(arg)
    if header.arch == "eagle3":
        return draft_spec_from_gguf(header)
    return draft_from_model(model_spec_from_gguf(header))


def draft_from_path(path: Path) -> DraftSpec:
    """The draft in an existing file or directory: a GGUF, an EAGLE-3 checkpoint, or a small model."""
    if path.is_file() and _is_gguf_file(path):
        return draft_from_gguf(str(path))
    if path.is_dir() and not (path / "config.json").is_file():
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) == 1:
            return draft_from_gguf(str(ggufs[0]))
        raise UsageError(f"{path} is not a draft: no config.json and {len(ggufs)} .gguf files",
                         hint="pass an EAGLE-3 checkpoint directory, a .gguf file, or a catalogue draft name")
    if path.is_file() and path.suffix.lower() != ".json":
        raise UsageError(f"{path} is not a draft file (neither GGUF nor config.json)",
                         hint="pass an EAGLE-3 checkpoint directory, a .gguf file, or a catalogue draft name")
    if is_eagle_config(load_config(path)):
        return draft_spec_from_checkpoint(path)
    return draft_from_model(_model_from_dir_or_config(path, None))


__all__ = ["draft_from_gguf", "draft_from_model", "draft_from_path", "model_from_gguf", "model_from_path"]
