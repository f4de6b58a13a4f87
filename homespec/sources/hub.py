"""Hugging Face repos through huggingface_hub: list a repo, pick its GGUF, read a header by range,
download into the standard cache (resumable, with a progress bar), fetch a draft head's snapshot.

Every call reads HF_ENDPOINT, HF_HUB_CACHE / HF_HOME and the token (HF_TOKEN, else `hf auth login`'s
file) when it runs, not when huggingface_hub was imported, so a test or a wrapper may set them late.
huggingface_hub is imported inside the functions: `homespec plan` on a local file never loads it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from homespec import interrupt
from homespec.errors import EXIT_USAGE, HomespecError, UsageError
from homespec.formats.http import check_network_allowed, hub_endpoint
from homespec.sources import pick
from homespec.sources.names import HubRef
from homespec.sources.stores import cache_dir, cached_hub_files


def _check_network() -> None:
    check_network_allowed(hub_endpoint())


@contextlib.contextmanager
def hub_errors(what: str) -> Iterator[None]:
    """huggingface_hub's and the network's exceptions -> one line and the fix."""
    import httpx2
    from huggingface_hub import errors as e

    try:
        yield
    except e.GatedRepoError:
        raise UsageError(f"{what} is gated: accept its terms on the model page, then authenticate",
                         hint="log in with `hf auth login` or set HF_TOKEN to a token with access") from None
    except e.RepositoryNotFoundError:
        # `org/repo` may also have been meant as a relative path: say that neither exists
        raise UsageError(f"no local path and no Hugging Face repo {what} (or it is private)",
                         hint="check the path, or the name on huggingface.co; a private repo needs HF_TOKEN or "
                              "`hf auth login`") from None
    except e.RevisionNotFoundError:
        raise UsageError(f"{what}: no such revision", hint="use a branch, tag or commit the repo has (default main)") from None
    except (e.RemoteEntryNotFoundError, e.EntryNotFoundError):
        raise UsageError(f"{what}: no such file in the repo", hint="list its files on huggingface.co, or pass org/repo:QUANT") from None
    except e.OfflineModeIsEnabled:
        raise HomespecError(f"{what} is not in the Hugging Face cache and HF_HUB_OFFLINE is set",
                            hint="unset HF_HUB_OFFLINE to download it, or pass a local file") from None
    except e.LocalEntryNotFoundError:
        raise HomespecError(f"cannot reach {hub_endpoint()} for {what}, and it is not in the cache",
                            hint="check the connection (or HF_ENDPOINT), then run the command again") from None
    except e.FileMetadataError:
        raise HomespecError(f"{hub_endpoint()} did not answer {what} as a Hugging Face hub does (no commit or ETag)",
                            hint="check HF_ENDPOINT, the proxy and the firewall; a mirror must serve the hub's headers") from None
    except e.HfHubHTTPError as err:
        code = err.response.status_code if err.response is not None else "?"
        raise HomespecError(f"the hub answered HTTP {code} for {what}",
                            hint="try again later; HF_TOKEN or `hf auth login` if the repo is private") from None
    except (httpx2.TransportError, ConnectionError) as err:
        raise HomespecError(f"cannot reach {hub_endpoint()} for {what}: {type(err).__name__}",
                            hint="check the connection (or HF_ENDPOINT); a partial download resumes on the next run") from None
    except OSError as err:
        if err.errno == errno.ENOSPC:
            raise HomespecError(f"the disk holding {cache_dir()} is full while downloading {what}",
                                hint="free space there, or point HF_HUB_CACHE at a larger disk; the download resumes") from None
        if "Not enough free disk space" in str(err):
            raise HomespecError(f"not enough free space in {cache_dir()} for {what}",
                                hint="free space there, or point HF_HUB_CACHE at a larger disk") from None
        raise


@dataclass(frozen=True, slots=True)
class RepoFiles:
    repo: str
    commit: str
    files: tuple[str, ...]
    sizes: dict[str, int]


def list_repo(repo: str, revision: str = "main") -> RepoFiles:
    """The repo's files at `revision` (one GET /api/models/{repo}/revision/{rev}?blobs=true)."""
    from huggingface_hub import HfApi

    _check_network()
    with hub_errors(repo):
        info = HfApi(endpoint=hub_endpoint()).model_info(repo, revision=revision, files_metadata=True)
    siblings = info.siblings or []
    sizes = {s.rfilename: s.size for s in siblings if s.size is not None}
    return RepoFiles(repo, info.sha or revision, tuple(s.rfilename for s in siblings), sizes)


@dataclass(frozen=True, slots=True)
class HubFile:
    """One GGUF of a repo at a commit, with every part a split model needs."""

    repo: str
    commit: str
    parts: tuple[str, ...]
    size: int | None = None
    revision: str = "main"  # the branch or tag named; the cache records it -> commit (refs/REV)

    @property
    def file(self) -> str:
        return self.parts[0]

    def url(self, part: str | None = None) -> str:
        from huggingface_hub import hf_hub_url

        return hf_hub_url(self.repo, part or self.file, revision=self.commit, endpoint=hub_endpoint())


def _from_cache(ref: HubRef) -> HubFile | None:
    """The file already in the hub cache at the ref's revision (no network), when it is there whole."""
    files = cached_hub_files(ref.repo, ref.revision)
    if files is None:
        return None
    commit, present = files
    try:
        first = ref.file or pick.pick_file(ref.repo, sorted(present), ref.tag)
    except UsageError:
        return None
    parts = tuple(pick.parts_of(first, sorted(present)))
    if not all(p in present for p in parts):
        return None
    return HubFile(ref.repo, commit, parts, sum(present[p].stat().st_size for p in parts), ref.revision)


def _listed(ref: HubRef, cached: HubFile | None) -> RepoFiles | None:
    """The repo's listing; None when the hub cannot be reached but the cache holds a choice."""
    import sys

    try:
        return list_repo(ref.repo, ref.revision)
    except HomespecError as e:
        if cached is None or e.exit_code == EXIT_USAGE:
            raise
        print(f"warning: {e.message}; using {cached.file} from the Hugging Face cache", file=sys.stderr)
        return None


@dataclass(frozen=True, slots=True)
class HubRepo:
    """A repo in the transformers layout (config.json, safetensors), not GGUF files."""

    repo: str
    commit: str
    revision: str = "main"


def _transformers_repo(ref: HubRef, listing: RepoFiles) -> HubRepo | None:
    if ref.file is None and ref.tag is None and "config.json" in listing.files and not pick.choices(list(listing.files)):
        return HubRepo(ref.repo, listing.commit, ref.revision)
    return None


def locate(ref: HubRef) -> HubFile | HubRepo:
    """The GGUF a hub name means. A named file or quant found in the cache is used without a
    request; a bare repo only when the cache holds its Q4_K_M (what the listing would pick: a
    cache holding only Q8_0 says nothing about the Q4_K_M the repo may have), or when the hub
    cannot be reached."""
    cached = _from_cache(ref)
    if cached is not None and (ref.file or ref.tag or pick.split_info(cached.file).tag == pick.DEFAULT_TAGS[0]):
        return cached
    listing = _listed(ref, cached)
    if listing is None:
        return cached
    if (whole := _transformers_repo(ref, listing)) is not None:
        return whole
    if ref.file:
        if ref.file not in listing.files:
            raise UsageError(f"{ref.repo} has no file {ref.file}",
                             hint=f"pass {ref.repo}:QUANT to pick one, or check the file name on huggingface.co")
        first = ref.file
    else:
        first = pick.pick_file(ref.repo, list(listing.files), ref.tag, listing.sizes)
    parts = tuple(pick.parts_of(first, list(listing.files)))
    missing = [p for p in parts if p not in listing.files]
    if missing:
        raise UsageError(f"{ref.repo}: split model {first} lacks {missing[0]}", hint="the repo is incomplete; pick another quant")
    size = sum(listing.sizes.get(p, 0) for p in parts) or None
    return HubFile(ref.repo, listing.commit, parts, size, ref.revision)


def cached_path(hub: HubFile) -> Path | None:
    """The first part's path in the cache when every part is there."""
    snap = cache_dir() / f"models--{hub.repo.replace('/', '--')}" / "snapshots" / hub.commit
    return snap / hub.file if all((snap / p).is_file() for p in hub.parts) else None


def _progress_class():
    """huggingface_hub shows its bars only on a terminal; homespec shows download progress on
    stderr always (a vanilla tqdm class is used as given: huggingface_hub utils/tqdm.py)."""
    import tqdm

    class DownloadBar(tqdm.tqdm):
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("mininterval", 0.5)
            kwargs.setdefault("dynamic_ncols", True)
            super().__init__(*args, **kwargs)

    return DownloadBar


def _check_space(folder: Path, need: int, what: str) -> None:
    import shutil

    free = shutil.disk_usage(folder).free
    if need > free:
        raise HomespecError(f"{what} needs {need / 2**30:.2f} GiB more and {folder} has {free / 2**30:.2f} GiB free",
                            hint="free space there, or point HF_HUB_CACHE at a larger disk; the download resumes")


def _fetch_blob(repo: str, part: str, revision: str) -> None:
    """The part's blob into the cache, resumable across runs.

    huggingface_hub 2.4.0 resumes a dropped connection within one call, but writes to a
    process-unique temporary file that it deletes on failure (file_download.py
    _download_to_tmp_and_move), so Ctrl-C loses everything. homespec keeps the partial blob as
    blobs/ETAG.incomplete, appends to it with huggingface_hub's own http_get (Range from the
    current size, retries, progress bar), and renames it to blobs/ETAG when whole; hf_hub_download
    then only links it into the snapshot. Xet-backed files are fetched the same way, over the
    HTTP redirect the hub gives them, so one resumable path serves every file."""
    import filelock
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.file_download import http_get
    from huggingface_hub.utils import build_hf_headers

    meta = get_hf_file_metadata(hf_hub_url(repo, part, revision=revision, endpoint=hub_endpoint()),
                                endpoint=hub_endpoint())
    blobs = cache_dir() / f"models--{repo.replace('/', '--')}" / "blobs"
    if meta.etag is None or (blobs / meta.etag).exists():
        return
    blobs.mkdir(parents=True, exist_ok=True)
    partial = blobs / f"{meta.etag}.incomplete"
    with filelock.FileLock(str(partial) + ".lock"):
        have = partial.stat().st_size if partial.exists() else 0
        if meta.size is not None:
            _check_space(blobs, meta.size - have, f"{repo}/{part}")
        headers = dict(build_hf_headers())
        check_network_allowed(meta.location)
        if urllib.parse.urlsplit(meta.location).netloc != urllib.parse.urlsplit(hub_endpoint()).netloc:
            headers.pop("authorization", None)  # a CDN link is signed; the token stays with the hub
        with interrupt.keeping(f"the partial download {partial} is kept and resumes on the next run"), \
                open(partial, "ab") as f:
            http_get(meta.location, f, resume_size=have, headers=headers, expected_size=meta.size,
                     displayed_filename=part, tqdm_class=_progress_class())
        os.replace(partial, blobs / meta.etag)


def download(hub: HubFile) -> Path:
    """Every part into the hub cache (models--org--repo/snapshots/COMMIT/...), resumed from
    blobs/ETAG.incomplete after Ctrl-C or a dropped connection. -> the first part's path."""
    from huggingface_hub import hf_hub_download

    if (hit := cached_path(hub)) is not None:
        return hit
    _check_network()
    paths = []
    with hub_errors(f"{hub.repo}/{hub.file}"):
        for part in hub.parts:
            _fetch_blob(hub.repo, part, hub.revision)
            # by the revision named, so the cache records refs/REV -> commit for the next offline lookup
            paths.append(hf_hub_download(hub.repo, part, revision=hub.revision, cache_dir=str(cache_dir()),
                                         endpoint=hub_endpoint(), tqdm_class=_progress_class()))
    return Path(paths[0])


# the files an EAGLE-3 head needs (formats/eagle.py, nets/eagle3.py): config, weights, d2t/t2d
_HEAD_PATTERNS = ["*.json", "*.safetensors", "*.bin", "*.gguf", "*.pt", "*.npy"]


def snapshot(repo: str, revision: str = "main") -> Path:
    """A draft head's files (config and weights, not its README or pictures) in the hub cache."""
    from huggingface_hub import snapshot_download

    cached = cached_hub_files(repo, revision)
    if cached is not None and "config.json" in cached[1]:
        return cache_dir() / f"models--{repo.replace('/', '--')}" / "snapshots" / cached[0]
    _check_network()
    with hub_errors(repo):
        return Path(snapshot_download(repo, revision=revision, cache_dir=str(cache_dir()), endpoint=hub_endpoint(),
                                      allow_patterns=_HEAD_PATTERNS))


def is_head_repo(ref: HubRef) -> bool:
    """A bare repo named as --draft: an EAGLE-3 head (config.json, or only head GGUFs such as
    eagle3-*.gguf) to fetch whole, rather than a GGUF draft model to pick one file of."""
    cached = cached_hub_files(ref.repo, ref.revision)
    if cached is not None and "config.json" in cached[1]:
        return True
    files = list(list_repo(ref.repo, ref.revision).files)
    return "config.json" in files or not pick.choices(files)


def config_dir(repo: HubRepo) -> Path:
    """A transformers repo's config.json alone in the hub cache: what the planner reads of it (the
    tensors are then predicted from the config's dtype, or from --quant: docs/formats.md)."""
    from huggingface_hub import hf_hub_download

    _check_network()
    with hub_errors(repo.repo):
        return Path(hf_hub_download(repo.repo, "config.json", revision=repo.revision, cache_dir=str(cache_dir()),
                                    endpoint=hub_endpoint())).parent


# what the torch backend loads from a transformers repo: config, weights, tokenizer
_MODEL_PATTERNS = ["*.json", "*.safetensors", "tokenizer.model"]


def model_snapshot(repo: HubRepo) -> Path:
    """A transformers repo's config, safetensors and tokenizer in the hub cache (for --backend torch)."""
    from huggingface_hub import snapshot_download

    _check_network()
    with hub_errors(repo.repo):
        return Path(snapshot_download(repo.repo, revision=repo.revision, cache_dir=str(cache_dir()),
                                      endpoint=hub_endpoint(), allow_patterns=_MODEL_PATTERNS))


__all__ = ["HubRepo", "is_head_repo", "config_dir", "model_snapshot", "HubFile", "RepoFiles", "cache_dir", "cached_path", "download", "hub_errors", "list_repo",
           "locate", "snapshot"]
