"""EAGLE heads already on this machine, found without a network request.

Three places (docs/cli.md, "Draft heads"):

* beside the model: `eagle3-*.gguf` in the model file's folder, or anywhere in the same Hugging Face
  snapshot (llama.cpp's -hf sidecars, which ggml-org publishes next to its GGUFs);
* the Hugging Face cache: a catalogue head's repo (its config.json and weights, or for a sidecar
  entry its one .gguf) at the revision `main` points to, as `homespec pull` leaves it;
* homespec's store: the heads shipped with homespec (homespec/data/heads/) and every head directory
  or eagle3 .gguf in $HOMESPEC_HEADS (where a user keeps the heads they train or export).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from homespec.catalog import load_catalog
from homespec.embedded import HEADS_DIR
from homespec.errors import HomespecError
from homespec.formats.eagle import is_eagle_config
from homespec.formats.gguf import read_gguf_header
from homespec.formats.hf import load_config
from homespec.sources.stores import cache_dir, cached_hub_files

SIDECAR_PREFIX = "eagle3-"  # llama.cpp common/download.cpp find_best_eagle3: files named eagle3-*.gguf
_WEIGHTS = (".safetensors", ".bin")


def _is_sidecar(path: Path) -> bool:
    return path.name.lower().startswith(SIDECAR_PREFIX) and path.suffix.lower() == ".gguf"


def _snapshot_root(path: Path) -> Path | None:
    """The snapshot folder a hub-cache file lies in (models--ORG--REPO/snapshots/COMMIT), else None."""
    parts = path.parts
    for i in range(len(parts) - 2):
        if parts[i].startswith("models--") and parts[i + 1] == "snapshots":
            return Path(*parts[: i + 3])
    return None


def sidecars(model_path: str | os.PathLike) -> list[Path]:
    """eagle3-*.gguf beside a model file, and in the rest of its hub snapshot (Q8_0 before BF16 as
    llama.cpp's -hf picks: the smaller first). A model directory is searched too."""
    p = Path(model_path)
    folders = [p] if p.is_dir() else [p.parent]
    root = _snapshot_root(p.absolute())
    found: dict[Path, None] = {}
    for folder in folders:
        for f in sorted(folder.glob("*.gguf")):
            if _is_sidecar(f):
                found[f] = None
    if root is not None:
        for f in sorted(root.rglob("*.gguf")):
            if _is_sidecar(f):
                found[f] = None
    return sorted(found, key=lambda f: (f.stat().st_size if f.exists() else 0, f.name))


def local_copy(entry: dict) -> Path | None:
    """A catalogue head on this machine: shipped with homespec (its folder under homespec/data/heads/,
    the entry's `acceptance` key), or in the Hugging Face cache: its snapshot folder (config.json and
    weights), or for a sidecar entry its .gguf; None when it is not here whole."""
    if entry.get("acceptance") and (HEADS_DIR / entry["acceptance"] / "config.json").is_file():
        return HEADS_DIR / entry["acceptance"]
    repo = entry.get("repo")
    if not repo:
        return None
    cached = cached_hub_files(repo, "main")
    if cached is None:
        return None
    _, present = cached
    if entry.get("file"):
        return present.get(entry["file"])
    if "config.json" not in present or not any(name.endswith(_WEIGHTS) for name in present):
        return None
    return present["config.json"].parent


def store_roots() -> list[Path]:
    roots = [HEADS_DIR]
    if os.environ.get("HOMESPEC_HEADS"):
        roots.append(Path(os.path.expanduser(os.environ["HOMESPEC_HEADS"])))
    return roots


def store_heads() -> list[Path]:
    """Every head in homespec's store: a folder holding config.json, or an eagle3 .gguf."""
    out: list[Path] = []
    for root in store_roots():
        if not root.is_dir():
            continue
        for item in sorted(root.iterdir()):
            if (item.is_dir() and (item / "config.json").is_file()) or (item.is_file() and item.suffix.lower() == ".gguf"):
                out.append(item)
    return out


@dataclass(frozen=True, slots=True)
class FoundHead:
    """A head on this machine, for `homespec models`: the name that selects it again and the model it drafts for."""

    source: str  # hf-cache | store
    name: str  # what to pass to --draft (a catalogue id where the catalogue knows it)
    path: Path
    size: int
    layout: str  # eagle3 (a checkpoint directory) | gguf
    pairs_with: str  # the catalogue models it is made for, or the target its files name


def _catalogue_name(repo: str, file: str | None) -> dict | None:
    for entry in load_catalog().draft_entries:
        if entry.get("repo") == repo and entry.get("file") == file:
            return entry
    return None


def _named_target(path: Path) -> str:
    """The target a head's own files name: an eagle3 GGUF's general.name (its converter's
    --model-name), a speculators config's verifier, an EAGLE config's target_model."""
    try:
        if path.is_file():
            return str(read_gguf_header(path).metadata.get("general.name") or "")

        cfg = load_config(path)
    except (HomespecError, OSError, ValueError):  # a listing shows what it can read
        return ""
    verifier = ((cfg.get("speculators_config") or {}).get("verifier") or {}).get("name_or_path")
    return str(verifier or cfg.get("target_model") or "")


def _size(path: Path) -> int:
    files = [path] if path.is_file() else [f for f in path.rglob("*") if f.is_file()]
    return sum(f.stat().st_size for f in files)


def _found(source: str, path: Path, entry: dict | None, name: str) -> FoundHead:
    pairs = ", ".join(entry["targets"]) if entry is not None else _named_target(path)
    return FoundHead(source, entry["id"] if entry is not None else name, path, _size(path),
                     "gguf" if path.is_file() else "eagle3", pairs or "?")


def _cached_heads(repo: str) -> list[FoundHead]:
    cached = cached_hub_files(repo, "main")
    if cached is None:
        return []
    _, present = cached
    out = []
    if "config.json" in present and any(f.endswith(_WEIGHTS) for f in present):
        try:
            head = is_eagle_config(load_config(present["config.json"]))
        except (HomespecError, OSError, ValueError):  # not a readable config: not a head
            head = False
        if head:
            out.append(_found("hf-cache", present["config.json"].parent, _catalogue_name(repo, None), repo))
    for rel, f in sorted(present.items()):
        if _is_sidecar(f):
            out.append(_found("hf-cache", f, _catalogue_name(repo, rel), f"{repo}/{rel}"))
    return out


def list_heads() -> list[FoundHead]:
    """Every head in the Hugging Face cache and in homespec's store."""
    out: list[FoundHead] = []
    root = cache_dir()
    for folder in sorted(root.glob("models--*--*")) if root.is_dir() else []:
        out += _cached_heads(folder.name[len("models--"):].replace("--", "/", 1))

    shipped = {e["acceptance"]: e for e in load_catalog().draft_entries if e.get("acceptance")}
    for head in store_heads():
        out.append(_found("store", head, shipped.get(head.name) if head.parent == HEADS_DIR else None, str(head)))
    return out


__all__ = ["FoundHead", "SIDECAR_PREFIX", "list_heads", "local_copy", "sidecars", "store_heads", "store_roots"]
