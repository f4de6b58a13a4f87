"""Models already on this machine: Ollama's store, LM Studio's models folder, the Hugging Face cache.

All three are read, never written. Where each is looked for (docs/formats.md "Where models are found"):

* Ollama (envconfig/config.go Models, types/model/name.go, server/modelpath.go, server/images.go): $OLLAMA_MODELS, else
  ~/.ollama/models (os.UserHomeDir: $HOME, %USERPROFILE% on Windows); the Linux service installed by
  install.sh runs as user `ollama` whose home is /usr/share/ollama, so /usr/share/ollama/.ollama/models
  too. A model is manifests/HOST/NAMESPACE/MODEL/TAG (JSON); its layer with mediaType
  application/vnd.ollama.image.model names the GGUF blob blobs/sha256-HEX (digest "sha256:HEX").
* LM Studio (lmstudio.ai/docs/basics/import-model): ~/.lmstudio/models/PUBLISHER/REPO/*.gguf, and
  the pre-0.3 folder ~/.cache/lm-studio/models; HOMESPEC_LMSTUDIO_MODELS names a folder chosen in the app.
* The hub cache (cache_dir()): models--ORG--REPO/refs/REV holds a commit,
  snapshots/COMMIT/PATH links to the blob.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from homespec.errors import FormatError, UsageError
from homespec.sources import pick
from homespec.sources.names import LMStudioRef, OllamaRef

OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


@dataclass(frozen=True, slots=True)
class Found:
    """A model file found in a store: where it came from and the name that resolves to it again."""

    source: str  # "ollama" | "lmstudio" | "hf-cache"
    name: str  # what to pass to --model
    path: Path
    size: int


def _home() -> Path:
    return Path(os.path.expanduser("~"))


# --- Ollama ------------------------------------------------------------------------------------

def ollama_roots() -> list[Path]:
    if os.environ.get("OLLAMA_MODELS"):
        return [Path(os.path.expanduser(os.environ["OLLAMA_MODELS"]))]
    roots = [_home() / ".ollama" / "models"]
    if sys.platform.startswith("linux"):
        roots.append(Path("/usr/share/ollama/.ollama/models"))
    return roots


def _manifest_blob(root: Path, manifest: Path) -> Path | None:
    """The GGUF blob a manifest's model layer names, or None (not a GGUF model, or unreadable)."""
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    layers = data.get("layers") if isinstance(data, dict) else None
    for layer in layers if isinstance(layers, list) else []:
        if not isinstance(layer, dict) or layer.get("mediaType") != OLLAMA_MODEL_LAYER:
            continue
        digest = str(layer.get("digest", ""))
        # blobs are named sha256-HEX (server/modelpath.go GetBlobsPath: ":" becomes "-")
        if re.match(r"^sha256[:-][0-9a-fA-F]{64}$", digest):
            return root / "blobs" / digest.replace(":", "-", 1)
    return None


def resolve_ollama(ref: OllamaRef) -> Path:
    roots = ollama_roots()
    for root in roots:
        manifest = root / "manifests" / ref.host / ref.namespace / ref.model / ref.tag
        if not manifest.is_file():
            continue
        blob = _manifest_blob(root, manifest)
        if blob is None:
            raise FormatError(f"{ref}: its Ollama manifest names no GGUF model layer ({manifest})",
                              hint="the model may be a different format; `ollama show` describes it")
        if not blob.is_file():
            raise FormatError(f"{ref}: the model blob {blob.name} is missing from {root / 'blobs'}",
                              hint=f"pull it again: ollama pull {str(ref)[len('ollama:'):]}")
        return blob
    where = " or ".join(str(r) for r in roots)
    raise UsageError(f"no Ollama model {ref} in {where}",
                     hint=f"pull it with `ollama pull {str(ref)[len('ollama:'):]}`, or set OLLAMA_MODELS to Ollama's models folder")


def _ollama_name(host: str, ns: str, model: str, tag: str) -> str:
    return str(OllamaRef(host, ns, model, tag))


def list_ollama() -> list[Found]:
    out = []
    for root in ollama_roots():
        base = root / "manifests"
        for manifest in sorted(base.glob("*/*/*/*")) if base.is_dir() else []:
            blob = _manifest_blob(root, manifest) if manifest.is_file() else None
            if blob is not None and blob.is_file():
                host, ns, model, tag = manifest.relative_to(base).parts
                out.append(Found("ollama", _ollama_name(host, ns, model, tag), blob, blob.stat().st_size))
    return out


# --- LM Studio ---------------------------------------------------------------------------------

def lmstudio_roots() -> list[Path]:
    if os.environ.get("HOMESPEC_LMSTUDIO_MODELS"):
        return [Path(os.path.expanduser(os.environ["HOMESPEC_LMSTUDIO_MODELS"]))]
    return [_home() / ".lmstudio" / "models", _home() / ".cache" / "lm-studio" / "models"]


def _gguf_files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.gguf") if p.is_file())


def resolve_lmstudio(ref: LMStudioRef) -> Path:
    roots = lmstudio_roots()
    for root in roots:
        folder = root / ref.publisher / ref.repo
        if not folder.is_dir():
            continue
        if ref.file:
            path = folder / ref.file
            if not path.is_file():
                raise UsageError(f"{ref}: no file {path}", hint="see `homespec models` for the files LM Studio holds")
            return path
        return folder / pick.pick_file(f"lmstudio:{ref.publisher}/{ref.repo}", _gguf_files(folder), ref.tag)
    where = " or ".join(str(r) for r in roots)
    raise UsageError(f"no LM Studio model {ref.publisher}/{ref.repo} in {where}",
                     hint="download it in LM Studio, or set HOMESPEC_LMSTUDIO_MODELS to LM Studio's models folder")


def list_lmstudio() -> list[Found]:
    out = []
    for root in lmstudio_roots():
        for folder in sorted(p for p in root.glob("*/*") if p.is_dir()) if root.is_dir() else []:
            files = _gguf_files(folder)
            for f in pick.choices(files):
                path = folder / f
                size = sum((folder / p).stat().st_size for p in pick.parts_of(f, files) if (folder / p).is_file())
                out.append(Found("lmstudio", f"lmstudio:{folder.parent.name}/{folder.name}/{f}", path, size))
    return out


# --- the Hugging Face cache --------------------------------------------------------------------

def cache_dir() -> Path:
    """The hub cache, by huggingface_hub's rule (constants.py): HF_HUB_CACHE, else HF_HOME/hub,
    else $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub (on Windows too)."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return Path(os.path.expanduser(os.environ[var]))
    if os.environ.get("HF_HOME"):
        return Path(os.path.expanduser(os.environ["HF_HOME"])) / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "huggingface" / "hub"


def _repo_dir(repo: str) -> Path:
    return cache_dir() / f"models--{repo.replace('/', '--')}"


def cached_hub_files(repo: str, revision: str = "main") -> tuple[str, dict[str, Path]] | None:
    """(commit, {path in repo: file}) of the cached snapshot of `revision`, or None when not cached."""
    folder = _repo_dir(repo)
    commit = revision if _COMMIT.match(revision) else None
    if commit is None:
        try:
            commit = (folder / "refs" / revision).read_text(encoding="utf-8").strip()
        except OSError:
            return None
    snap = folder / "snapshots" / commit
    if not snap.is_dir():
        return None
    return commit, {p.relative_to(snap).as_posix(): p for p in snap.rglob("*") if p.is_file()}


def list_hf_cache() -> list[Found]:
    out = []
    root = cache_dir()
    for folder in sorted(root.glob("models--*--*")) if root.is_dir() else []:
        repo = folder.name[len("models--"):].replace("--", "/", 1)
        cached = cached_hub_files(repo, "main")
        if cached is None:
            continue
        files = sorted(cached[1])
        for f in pick.choices(files):
            parts = pick.parts_of(f, files)
            if all(p in cached[1] for p in parts):
                size = sum(cached[1][p].stat().st_size for p in parts)
                out.append(Found("hf-cache", f"{repo}/{f}", cached[1][f], size))
    return out


def find_all() -> list[Found]:
    return [*list_ollama(), *list_lmstudio(), *list_hf_cache()]
