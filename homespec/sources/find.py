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

from homespec.embedded import smollm2_path
from homespec.errors import UsageError
from homespec.userfiles import existing
from homespec.sources.names import HubRef, LMStudioRef, OllamaRef, SourceRef, parse


def _local(ref: SourceRef) -> Path | None:
    """A store on this machine: the file, or None for a hub name."""
    if isinstance(ref, OllamaRef):
        from homespec.sources.stores import resolve_ollama  # startup: a catalogue name reads no store

        return resolve_ollama(ref)
    if isinstance(ref, LMStudioRef):
        from homespec.sources.stores import resolve_lmstudio  # startup: a catalogue name reads no store

        return resolve_lmstudio(ref)
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
    # startup: a catalogue name loads no hub code
    from homespec.sources.hub import HubRepo, cached_path, config_dir, locate

    hub = locate(ref)
    if isinstance(hub, HubRepo):  # a transformers repo: its config.json is what a plan reads
        return str(config_dir(hub))
    cached = cached_path(hub)
    return str(cached) if cached is not None else hub.url()


def is_hub_repo(name: str) -> bool:
    """`name` is a bare hub repo (org/repo, no file, no quant tag): a draft head's spelling."""
    ref = source_ref(name)
    return isinstance(ref, HubRef) and ref.file is None and ref.tag is None


def is_head_repo(name: str) -> bool:
    """`name` is a bare hub repo holding an EAGLE-3 head (fetched whole), not a GGUF model repo."""
    if not is_hub_repo(name):
        return False
    from homespec.sources.hub import is_head_repo as hub_is_head_repo  # startup: a catalogue name loads no hub code

    return hub_is_head_repo(source_ref(name))


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
    # startup: a catalogue name loads no hub code
    from homespec.sources.hub import HubRepo, download, locate, model_snapshot

    hub = locate(ref)
    return str(model_snapshot(hub) if isinstance(hub, HubRepo) else download(hub))


def resolve_head_for_run(name: str) -> Path:
    """An EAGLE-3 head: an existing directory or file, or a hub repo fetched whole into the cache."""
    path = existing(name, "draft")
    if path is not None:
        return path
    ref = source_ref(name)
    if is_head_repo(name):
        from homespec.sources.hub import snapshot  # startup: a catalogue name loads no hub code

        return snapshot(ref.repo, ref.revision)
    if ref is not None:  # a GGUF draft model, by any spelling
        return Path(resolve_for_run(name))
    raise UsageError(f"no draft head at '{name}'",
                     hint="pass the directory holding config.json and model.safetensors, or the head's repo: org/repo")


__all__ = ["is_head_repo", "is_hub_repo", "resolve_for_plan", "resolve_for_run", "resolve_head_for_run", "source_ref"]
