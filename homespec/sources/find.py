"""Finding the file a source name points at (homespec.sources.resolve calls these).

Two functions, one per need:

* resolve_for_plan(name): what a header reader can open without downloading the model: a local path,
  or the hub URL of the file (read by range, homespec.formats.http). Names that are no source
  (catalogue names, other URLs) come back unchanged.
* resolve_for_run(name): a local file a backend can load; a hub model is downloaded into the hub
  cache first (resumable, progress on stderr).

The spellings are in homespec.sources.names; the GGUF choice inside a repo in homespec.sources.pick.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from homespec.embedded import smollm2_path
from homespec.errors import UsageError
from homespec.userfiles import existing
from homespec.sources.names import HubRef, LMStudioRef, OllamaRef, SourceRef, parse


def _stores() -> ModuleType:
    """homespec.sources.stores, imported on the first store name (Ollama, LM Studio)."""
    from homespec.sources import stores  # startup: a catalogue name reads no store

    return stores


def _hub() -> ModuleType:
    """homespec.sources.hub, imported on the first hub name."""
    from homespec.sources import hub  # startup: a catalogue name loads no hub code

    return hub


def _local(ref: SourceRef) -> Path | None:
    """A store on this machine: the file, or None for a hub name."""
    if isinstance(ref, OllamaRef):
        return _stores().resolve_ollama(ref)
    if isinstance(ref, LMStudioRef):
        return _stores().resolve_lmstudio(ref)
    return None


def source_ref(name: str) -> SourceRef | None:
    """The source `name` points at, or None when it is an existing path or no source name."""
    if not name or existing(name) is not None:
        return None
    return parse(name)


def resolve_for_plan(name: str) -> str:
    """A path or hub URL whose GGUF header describes `name`; `name` itself when it is no source name.
    A hub file already in the cache is read there; otherwise only its header is fetched (by range)."""
    ref = source_ref(name)
    if ref is None:
        return name
    local = _local(ref)
    if local is not None:
        return str(local)
    hubs = _hub()
    hub = hubs.locate(ref)
    if isinstance(hub, hubs.HubRepo):  # a transformers repo: its config.json is what a plan reads
        return str(hubs.config_dir(hub))
    cached = hubs.cached_path(hub)
    return str(cached) if cached is not None else hub.url()


def is_hub_repo(name: str) -> bool:
    """`name` is a bare hub repo (org/repo, no file, no quant tag): a draft head's spelling."""
    ref = source_ref(name)
    return isinstance(ref, HubRef) and ref.file is None and ref.tag is None


def is_head_repo(name: str) -> bool:
    """`name` is a bare hub repo holding an EAGLE-3 head (fetched whole), not a GGUF model repo."""
    if not is_hub_repo(name):
        return False
    return _hub().is_head_repo(source_ref(name))


def resolve_for_run(name: str | None) -> str:
    """A local model file or directory for `name`: None -> the embedded SmolLM2, an existing path
    as given, a store name -> its file, a hub name -> downloaded into the hub cache."""
    if name is None:
        return str(smollm2_path())
    path = existing(name)
    if path is not None:
        return str(path)
    ref = source_ref(name)
    if ref is None:
        if "://" in name:
            raise UsageError(f"cannot run a model from a URL outside the Hugging Face hub: {name}",
                             hint="download the file, then pass its path (or name it as org/repo:QUANT)")
        raise UsageError(
            f"no model file or directory at '{name}'",
            hint="pass a GGUF file, a Hugging Face directory, org/repo[:QUANT], ollama:NAME or lmstudio:PUB/REPO "
                 "(catalogue names are for `homespec plan`; `homespec models` lists what is on this machine)",
        )
    local = _local(ref)
    if local is not None:
        return str(local)
    hubs = _hub()
    hub = hubs.locate(ref)
    return str(hubs.model_snapshot(hub) if isinstance(hub, hubs.HubRepo) else hubs.download(hub))


def resolve_head_for_run(name: str) -> Path:
    """An EAGLE-3 head: an existing directory or file, or a hub repo fetched whole into the cache."""
    path = existing(name, "draft")
    if path is not None:
        return path
    ref = source_ref(name)
    if is_head_repo(name):
        return _hub().snapshot(ref.repo, ref.revision)
    if ref is not None:  # a GGUF draft model, by any spelling
        return Path(resolve_for_run(name))
    raise UsageError(f"no draft head at '{name}'",
                     hint="pass the directory holding config.json and model.safetensors, or the head's repo: org/repo")


__all__ = ["is_head_repo", "is_hub_repo", "resolve_for_plan", "resolve_for_run", "resolve_head_for_run", "source_ref"]
