"""Who a head is made for, and who a model is: the identities a head is paired with its target by.

A target's identity is what a head's weights depend on: its architecture, layer count (the head
reads features at layer ids counted in it), hidden size (the width of those features), vocabulary
size (the ids the head emits) and the vocabulary itself (homespec.formats.tokenizer_hash). A head
names the same things about the target it was trained on: a catalogue entry through its target
model (profiles/drafts.toml), a head directory through its config.json (and its target's tokenizer
when it ships one), an eagle3 GGUF through its header, which carries its target's tokenizer.

Every identity is read from headers and config files alone: no weights load (docs/catalogue.md,
"Heads and their targets"). `mismatch(head, target)` names the first difference in one line.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path

from homespec.catalog import load_catalog
from homespec.errors import UsageError
from homespec.formats.eagle import draft_spec_from_checkpoint, feature_layers
from homespec.formats.gguf import read_gguf_header, read_model_header
from homespec.formats.gguf_model import draft_spec_from_gguf, model_spec_from_gguf, target_layers
from homespec.formats.hf import load_config, model_shape_from_config
from homespec.formats.tokenizer_hash import (
    TOKENS_KEY, directory_tokenizer_digest, gguf_tokenizer_digest, gguf_tokens_digest,
)

_NORM = re.compile(r"[\s_]+")


def norm_name(text: str) -> str:
    """A name as the catalogue compares names: lower case, spaces and underscores as '-'."""
    return _NORM.sub("-", text.strip().lower())


@dataclass(frozen=True, slots=True)
class TargetIdentity:
    """A target model as a head sees it. `names`: what the file goes by (its metadata name,
    file name, folder and repo), normalised, for telling apart models of one shape."""

    path: str
    arch: str
    n_layer: int
    n_embd: int
    n_vocab: int
    names: tuple[str, ...] = ()

    @property
    def tokenizer(self) -> str | None:
        """The vocabulary's hash (read on first use, then remembered per file version)."""
        return _tokenizer_of(self.path, *_stamp(self.path))


@dataclass(frozen=True, slots=True)
class HeadIdentity:
    """The target a head was made for, as far as the head says. None: the head does not say."""

    name: str
    target_hidden: int
    target_vocab: int
    layer_ids: tuple[int, ...] | None = None  # HF hidden_states indices the head reads
    target_layers: int | None = None  # the layer count of the model it was trained on
    target_arch: str | None = None
    tokenizer: str | None = None
    target_names: tuple[str, ...] = ()  # catalogue keys of its target ("llama-3.1-8b", ...)


def _stamp(path: str) -> tuple[int, int]:
    try:
        st = os.stat(path)
        return st.st_size, st.st_mtime_ns
    except OSError:
        return 0, 0


@functools.lru_cache(maxsize=32)
def _tokenizer_of(path: str, size: int, mtime: int) -> str | None:
    p = Path(path)
    if p.is_dir():
        return directory_tokenizer_digest(p)
    return gguf_tokenizer_digest(p) if p.is_file() else None


def _hub_repo_name(path: Path) -> str | None:
    """The repo part of a file in the Hugging Face cache (models--ORG--REPO/snapshots/COMMIT/...)."""
    for part in path.parts:
        if part.startswith("models--") and part.count("--") >= 2:
            return part.split("--", 2)[2]
    return None


def _gguf_names(path: Path, md: dict) -> list[str]:
    names = [str(md.get("general.name") or "")]
    base, size = md.get("general.basename"), md.get("general.size_label")
    if base and size:
        names.append(f"{base}-{size}" + (f"-{md['general.finetune']}" if md.get("general.finetune") else ""))
    return names


def target_identity(path: str | os.PathLike) -> TargetIdentity:
    """The identity of a local target: a GGUF file (its header) or a Hugging Face directory (config.json)."""
    p = Path(path)
    names = [p.stem if p.is_file() else p.name, p.parent.name]
    if p.is_dir() or p.suffix == ".json":  # a Hugging Face folder, or its config.json
        folder = p if p.is_dir() else p.parent
        names[0] = folder.name
        spec = model_shape_from_config(load_config(p), folder.name, str(folder))
    else:
        header = read_model_header(p)
        if header.arch == "eagle3":
            raise UsageError(f"{p} is an EAGLE-3 draft head, not a target model", hint="pass it as --draft")
        spec = model_spec_from_gguf(header)
        names += _gguf_names(p, header.metadata)
    repo = _hub_repo_name(p)
    if repo:
        names.append(repo)
    return TargetIdentity(str(p), spec.arch, spec.n_layer, spec.n_embd, spec.n_vocab,
                          tuple(dict.fromkeys(norm_name(n) for n in names if n)))


# --- what a head says about its target ----------------------------------------------------------


def entry_identity(entry: dict) -> HeadIdentity:
    """A catalogue head's target: its [[draft]] table and the catalogue model it names."""
    catalog = load_catalog()
    model = catalog.target_entry(entry)
    ids = entry.get("layer_ids")
    return HeadIdentity(
        name=entry["id"], target_hidden=int(entry["target_hidden"]), target_vocab=int(entry["target_vocab"]),
        layer_ids=tuple(int(i) for i in ids) if ids else None,
        target_layers=model.spec.n_layer if model is not None else None,
        target_arch=model.spec.arch if model is not None else None,
        tokenizer=entry.get("tokenizer_sha256"),
        target_names=tuple(k for t in entry["targets"] for k in catalog.entry(t).keys),
    )


def path_identity(path: str | os.PathLike) -> HeadIdentity:
    """A head on disk: an eagle3 GGUF (its header) or a head directory (its config.json, and a
    tokenizer.json beside it when the head ships its target's tokenizer)."""
    p = Path(path)
    if p.is_file():
        return _gguf_identity(p)

    spec = draft_spec_from_checkpoint(p)
    return HeadIdentity(name=p.name, target_hidden=spec.target_hidden, target_vocab=spec.target_vocab,
                        layer_ids=feature_layers(p) or None, tokenizer=directory_tokenizer_digest(p))


def _gguf_identity(p: Path) -> HeadIdentity:
    header = read_gguf_header(p, keep_arrays=(TOKENS_KEY,))
    if header.arch != "eagle3":
        raise UsageError(f"{p} is a {header.arch or 'non-eagle3'} GGUF, not an EAGLE-3 head",
                         hint="pass an eagle3 GGUF (llama.cpp's eagle3-*.gguf sidecars), a head directory, "
                              "or use it with --method draft")
    spec = draft_spec_from_gguf(header)
    tokens = header.metadata.get(TOKENS_KEY)
    return HeadIdentity(name=p.name, target_hidden=spec.target_hidden, target_vocab=spec.target_vocab,
                        layer_ids=target_layers(header) or None,
                        tokenizer=gguf_tokens_digest(tokens) if isinstance(tokens, list) and tokens else None)


# --- the comparison -----------------------------------------------------------------------------


def mismatch(head: HeadIdentity, target: TargetIdentity) -> str | None:
    """The first way `head` does not fit `target`, in a few words; None when it fits.
    Layer ids index HF hidden_states (0 = the embeddings, N = the last layer's output)."""
    if head.target_hidden != target.n_embd:
        return f"hidden size {head.target_hidden} vs {target.n_embd}"
    if head.target_vocab and head.target_vocab != target.n_vocab:
        return f"vocabulary {head.target_vocab:,} vs {target.n_vocab:,} tokens"
    if head.target_layers is not None and head.target_layers != target.n_layer:
        return f"made for a {head.target_layers}-layer model, this one has {target.n_layer}"
    if head.layer_ids is not None and (len(head.layer_ids) != 3 or min(head.layer_ids) < 0
                                       or max(head.layer_ids) > target.n_layer):
        return f"reads layers {list(head.layer_ids)}, this model has {target.n_layer}"
    if head.target_arch is not None and head.target_arch != target.arch:
        return f"made for a {head.target_arch} model, this one is {target.arch}"
    if head.tokenizer is not None:
        mine = target.tokenizer
        if mine is not None and mine != head.tokenizer:
            return f"tokenizer {head.tokenizer[:12]} vs {mine[:12]} (sha256 of the vocabulary)"
    return None


def name_matches(head: HeadIdentity, target: TargetIdentity) -> bool:
    """Whether a name the target goes by contains one of the head's target names as a whole word
    ("meta-llama-3.1-8b-instruct-q4_k_m" contains "llama-3.1-8b")."""
    for key in head.target_names:
        pattern = re.compile(rf"(?:^|[^a-z0-9.]){re.escape(key)}(?:$|[^a-z0-9])")
        if any(pattern.search(n) for n in target.names):
            return True
    return False


__all__ = ["HeadIdentity", "TargetIdentity", "entry_identity", "mismatch", "name_matches", "norm_name",
           "path_identity", "target_identity"]
