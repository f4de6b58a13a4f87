"""`homespec pull ID|REPO[:QUANT]`: a head or a model into the Hugging Face cache, as `ollama pull` fetches
one: resumable (every file goes through homespec.sources.hub's blobs/ETAG.incomplete), with a
progress bar on stderr, and a no-op when everything is already there.

What a spelling fetches (docs/cli.md, "homespec pull"):

* a catalogue head (`eagle3-llama3.1-8b`, `redhat-eagle3-qwen3-8b`, or its repo): the head's
  config.json and weights; a sidecar entry (`ggml-eagle3-gpt-oss-20b`): its one eagle3 .gguf;
* a hub repo holding an EAGLE-3 head (config.json, no GGUF model): the same;
* a GGUF repo, `org/repo[:QUANT]` or one file of it: the GGUF (every part of a split one) as
  `--model` picks it, and the `eagle3-*.gguf` sidecar beside it that llama.cpp's -hf would fetch
  (`--no-draft` leaves it), so that `--draft auto` finds it there;
* a transformers repo: its config, safetensors and tokenizer (what --backend torch loads).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from homespec.catalog import load_catalog
from homespec.errors import UsageError
from homespec.sources import pick
from homespec.sources.find import is_head_repo, source_ref
from homespec.sources.hub import HubFile, HubRepo, download, list_repo, locate, model_snapshot
from homespec.sources.names import HubRef, LMStudioRef, OllamaRef

if TYPE_CHECKING:
    from homespec.sources.hub import RepoFiles


@dataclass(frozen=True, slots=True)
class Pulled:
    """One thing fetched: what it is, its repo, and where it is now (a file or a snapshot folder)."""

    kind: str  # head | sidecar | model
    repo: str
    path: Path
    files: tuple[str, ...]
    size: int  # bytes of the files, as the hub listed them (0 when it did not say)
    name: str  # what to pass to --model / --draft for it


# what a head's snapshot needs (homespec.formats.eagle, homespec.nets.eagle3_files): config, weights, d2t/t2d
_HEAD_FILES = (".json", ".safetensors", ".bin", ".npy", ".pt")


def _head_files(files: list[str]) -> list[str]:
    keep = sorted(f for f in files if f.endswith(_HEAD_FILES) and "/" not in f)
    if "config.json" not in keep:
        raise UsageError("the repo holds no config.json at its top", hint="is it an EAGLE-3 head? pass a GGUF repo as org/repo:QUANT")
    return ["config.json", *(f for f in keep if f != "config.json")]


def _pull_files(listing: "RepoFiles", files: list[str], revision: str = "main") -> tuple[Path, int]:
    """Every file of the listed repo into the cache (resumable). -> (the first file's path, bytes listed)."""
    missing = [f for f in files if f not in listing.files]
    if missing:
        raise UsageError(f"{listing.repo} has no {missing[0]}",
                         hint=f"check the repo on huggingface.co (it lists {len(listing.files)} files)")
    size = sum(listing.sizes.get(f, 0) for f in files)
    return download(HubFile(listing.repo, listing.commit, tuple(files), size or None, revision)), size


def _pull_head_repo(repo: str, name: str, revision: str = "main") -> Pulled:
    listing = list_repo(repo, revision)
    files = _head_files(list(listing.files))
    first, size = _pull_files(listing, files, revision)
    return Pulled("head", repo, first.parent, tuple(files), size, name)


def pull_entry(entry: dict) -> Pulled:
    """A catalogue head: its repo's head files, or a sidecar entry's one .gguf."""
    if not entry.get("repo"):
        raise UsageError(f"{entry['id']} ships with homespec: there is nothing to pull",
                         hint="it is used as it is (`homespec models` lists it)")
    if entry.get("file"):
        path, size = _pull_files(list_repo(entry["repo"]), [entry["file"]])
        return Pulled("sidecar", entry["repo"], path, (entry["file"],), size, entry["id"])
    return _pull_head_repo(entry["repo"], entry["id"])


def _pull_gguf(ref: HubRef, with_draft: bool) -> list[Pulled]:
    hub = locate(ref)
    path = download(hub)
    out = [Pulled("model", hub.repo, path, hub.parts, hub.size or 0, f"{hub.repo}/{hub.file}")]
    if with_draft:
        listing = list_repo(hub.repo, ref.revision)
        sidecar = pick.best_sibling(list(listing.files), hub.file, "eagle3-", ref.tag)
        if sidecar is not None:
            first, size = _pull_files(listing, [sidecar], ref.revision)
            out.append(Pulled("sidecar", hub.repo, first, (sidecar,), size, f"{hub.repo}/{sidecar}"))
    return out


def pull(spelling: str, *, with_draft: bool = True) -> list[Pulled]:
    """Fetch what `spelling` names into the Hugging Face cache (see the module); what was fetched."""
    if not spelling or not spelling.strip():
        raise UsageError("pull needs a name", hint="e.g. homespec pull eagle3-llama3.1-8b, or org/repo:Q4_K_M")
    entry = load_catalog().draft_entry(spelling)
    if entry is not None:
        return [pull_entry(entry)]
    ref = source_ref(spelling)
    if isinstance(ref, (OllamaRef, LMStudioRef)):
        raise UsageError(f"{spelling} is pulled by {'ollama' if isinstance(ref, OllamaRef) else 'LM Studio'} itself",
                         hint="homespec runs it from that store as it is; `homespec pull` fetches from Hugging Face")
    if ref is None:
        raise UsageError(f"'{spelling}' is neither a catalogue head nor a Hugging Face repo",
                         hint="pass a head id (`homespec plan --help` names the catalogue), org/repo or org/repo:QUANT")
    if is_head_repo(spelling):
        return [_pull_head_repo(ref.repo, spelling, ref.revision)]

    found = locate(ref)
    if isinstance(found, HubRepo):
        folder = model_snapshot(found)
        return [Pulled("model", found.repo, folder, (), 0, str(folder))]
    return _pull_gguf(ref, with_draft)


__all__ = ["Pulled", "pull", "pull_entry"]
