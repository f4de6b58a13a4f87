"""--model / --draft spellings -> what they name: `resolve(spelling, role, purpose) -> Resolved`.

The one entry point of homespec for naming a model. `role` is what the spelling is given as (the
target "model", a "draft" model or an EAGLE "head"); `purpose` what the caller does with it: "plan"
reads shapes without downloading weights (a GGUF on the hub is read by range), "run" needs a local
file a backend loads (a hub model is downloaded into the hub cache first). The spellings themselves
are parsed in homespec.sources.names, found in stores by homespec.sources.stores and on the hub by
homespec.sources.hub; the files are read by homespec.formats (through homespec.sources.files,
imported on the first name that is no catalogue name), which knows nothing of names.

Order for --model: http(s) URL (a GGUF read by range) -> existing path (a .gguf file, a
config.json, an HF or EXL2 directory) -> something that looks like a path but does not exist
(UsageError: file not found) -> a catalogue name. A path that exists but holds no model is a
different error ("not a model") from one that does not exist.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from types import ModuleType
from typing import Literal

from homespec.catalog import load_catalog, mtp_draft
from homespec.embedded import smollm2_path
from homespec.errors import UsageError
from homespec.formats.http import is_url
from homespec.sources.find import (
    is_head_repo, is_hub_repo, resolve_for_plan, resolve_for_run, resolve_head_for_run, source_ref,
)
from homespec.sources.names import LMStudioRef, OllamaRef
from homespec.userfiles import existing
from homespec.types import DraftSpec, ModelSpec

# llama.cpp's speculative decoding accepts draft and target vocabularies this far apart
# (common/speculative.cpp SPEC_VOCAB_MAX_SIZE_DIFFERENCE): padded embeddings in one family.
VOCAB_SLACK = 128


def _looks_like_path(arg: str) -> bool:
    return (os.sep in arg or arg.startswith((".", "~")) or arg.endswith((".gguf", ".json", ".safetensors"))
            or (os.altsep is not None and os.altsep in arg))


def _files() -> ModuleType:
    """homespec.sources.files, imported on the first file, directory or URL named."""
    from homespec.sources import files  # startup: a catalogue name reads no file format

    return files


def _catalogue_model(name: str, quant: str | None) -> ModelSpec:
    catalog = load_catalog()
    if quant:  # "qwen2.5-7b" + --quant q5 (a name with its own suffix takes no --quant)
        return catalog.quantised(catalog.entry(name), quant)
    return catalog.model(name)  # "qwen2.5-7b-q5", or Q4_K_M by default


def _model_spec(arg: str, quant: str | None = None) -> ModelSpec:
    """The target model named by --model (and --quant where the argument leaves it open)."""
    if not arg or not arg.strip():
        raise UsageError("--model is empty", hint="pass a catalogue name, a .gguf file, a directory or a URL")
    arg = _located(arg)  # org/repo[:QUANT], ollama:NAME, ... -> a local path or the file's hub URL
    if is_url(arg):
        return _files().model_from_gguf(arg, quant)
    path = existing(arg)
    if path is not None:
        return _files().model_from_path(path, quant)
    if _looks_like_path(arg):
        raise UsageError(f"no such file or directory: {arg}", hint="check the path (or give a catalogue name)")
    return _catalogue_model(arg, quant)


def _catalogue_draft(name: str) -> DraftSpec:
    catalog = load_catalog()
    try:
        return catalog.draft(name)
    except UsageError as draft_error:
        try:  # a catalogue *model* named as the draft: classic draft-model speculation
            return _files().draft_from_model(catalog.model(name))
        except UsageError:
            raise draft_error from None


def check_pairing(draft: DraftSpec, target: ModelSpec) -> None:
    """A head reads the target's features and emits its token ids: the widths must agree."""
    if draft.kind == "mtp":
        return  # the target's own layers
    if draft.kind == "model":
        if abs(draft.target_vocab - target.n_vocab) > VOCAB_SLACK:
            raise UsageError(
                f"draft model {draft.name} has a {draft.target_vocab}-token vocabulary, "
                f"the target {target.name} has {target.n_vocab}",
                hint="a draft model must share the target's tokenizer; pick one from the same family")
        return
    if draft.target_hidden != target.n_embd:
        raise UsageError(
            f"EAGLE head {draft.name} expects target features of width {draft.target_hidden}, "
            f"but {target.name} has hidden size {target.n_embd}",
            hint="use a head trained for this target (`homespec plan` lists the catalogue's pairings)")
    if draft.target_vocab and draft.target_vocab != target.n_vocab:
        raise UsageError(
            f"EAGLE head {draft.name} maps to a {draft.target_vocab}-token vocabulary, "
            f"but {target.name} has {target.n_vocab}",
            hint="use a head trained for this target (`homespec plan` lists the catalogue's pairings)")


def _located(arg: str) -> str:
    return resolve_for_plan(arg)


def _hub_draft(arg: str) -> DraftSpec | None:
    """A draft named by source (org/repo, org/repo:QUANT, ollama:NAME, ...); None for other names.
    A bare repo the catalogue knows is the catalogue's head (no network); another bare repo holding
    an EAGLE-3 head is fetched into the hub cache (heads are small) and read there; a GGUF model repo
    is a draft model, its header read by range."""
    if source_ref(arg) is None:
        return None
    if is_hub_repo(arg):
        try:
            return load_catalog().draft(arg)
        except UsageError:
            if is_head_repo(arg):
                return _files().draft_from_path(resolve_head_for_run(arg))
    return _files().draft_from_gguf(_located(arg))  # a GGUF draft model: its header, by range


def _draft_spec(arg: str | None, target: ModelSpec) -> DraftSpec | None:
    """The draft named by --draft: None -> the catalogue's pairing for the target, 'none' -> no draft."""
    if is_auto(arg):
        draft = load_catalog().draft_for(target)
    elif arg.strip().lower() in ("none", ""):
        return None
    elif arg.strip().lower() == "mtp":
        return mtp_draft(target)
    elif is_url(arg):
        draft = _files().draft_from_gguf(_located(arg))
    elif (hub := _hub_draft(arg)) is not None:
        draft = hub
    else:
        path = existing(arg, "draft")
        if path is not None:
            draft = _files().draft_from_path(path)
        elif _looks_like_path(arg):
            raise UsageError(f"no such file or directory: {arg}", hint="check the path (or give a catalogue draft name)")
        else:
            draft = _catalogue_draft(arg)
    if draft is not None:
        check_pairing(draft, target)
    return draft


Role = Literal["model", "draft", "head"]
Purpose = Literal["plan", "run"]
ROLES: tuple[str, ...] = ("model", "draft", "head")
PURPOSES: tuple[str, ...] = ("plan", "run")


@dataclass(frozen=True, slots=True)
class Resolved:
    """What one spelling names. `path`: for "plan", what a header reader opens (a local path or a hub
    URL; None for a catalogue name, which has no file); for "run", a local file or directory (None
    for a head that is not on this machine, or none at all). `spec`: the shapes, read for "plan"
    (None for a run, whose backend reads its own file, and for --draft none). `source`: where it was
    found (see `source_of`; a paired head: auto:shipped, auto:sidecar, auto:hf-cache, auto:store,
    auto:none). `note`: one line for the user (the command that fetches a head that is not here)."""

    spelling: str | None
    role: str
    purpose: str
    path: str | None
    spec: ModelSpec | DraftSpec | None
    source: str
    note: str | None = None


def source_of(spelling: str | None) -> str:
    """embedded (no spelling), none, mtp, path, url, hub, ollama, lmstudio or catalogue."""
    if spelling is None:
        return "embedded"
    if spelling.strip().lower() in ("none", "", "mtp"):
        return spelling.strip().lower() or "none"
    if existing(spelling) is not None:
        return "path"
    ref = source_ref(spelling)
    if isinstance(ref, OllamaRef):
        return "ollama"
    if isinstance(ref, LMStudioRef):
        return "lmstudio"
    if ref is not None:
        return "hub"
    return "url" if is_url(spelling) else "catalogue"


def _run_path(spelling: str | None, role: str) -> str:
    if role == "head" and spelling is not None:
        return str(resolve_head_for_run(spelling))
    return resolve_for_run(spelling)


def is_auto(spelling: str | None) -> bool:
    """None or "auto": the head (or draft) homespec pairs with the model."""
    return spelling is None or spelling.strip().lower() == "auto"


def _run_head(spelling: str | None, target_path: str) -> tuple[str | None, str | None, str]:
    """(path, note, source) of the head `spelling` names for the local target at `target_path`,
    checked against it before anything loads (homespec.sources.pairing): auto pairs one; a
    catalogue head that is not here is None with the line that fetches it; a hub repo is fetched."""
    from homespec.sources import pairing  # startup: heads are paired for a run, not for `homespec plan`
    from homespec.sources.identity import target_identity

    if is_auto(spelling):
        p = pairing.pair(target_path)
        return (str(p.head) if p.head is not None else None), p.note, f"auto:{p.where}"
    if spelling.strip().lower() in ("none", ""):
        return None, None, "none"
    target = target_identity(target_path)
    path = existing(spelling, "draft")
    if path is None and not _looks_like_path(spelling):
        # startup: heads are paired for a run, not for `homespec plan`
        from homespec.sources.heads_here import local_copy

        entry = load_catalog().draft_entry(spelling)
        if entry is not None:
            pairing.check_entry(entry, target)  # refused on the catalogue's shapes, before any download
            local = local_copy(entry)
            if local is not None:
                path = local
            elif source_ref(spelling) is None:  # a catalogue id: say how to fetch it
                return None, pairing.fetch_note(entry, target).replace(" drafts for ", " would draft for "), "catalogue"
    if path is None:
        path = resolve_head_for_run(spelling)  # a path that does not exist is refused here; a repo is fetched
    pairing.check_path(path, target)
    return str(path), None, source_of(spelling)


def _read_from(spec: ModelSpec | DraftSpec | None, source: str) -> str | None:
    """The file or URL the shapes were read from (the readers record it); None for the catalogue."""
    if spec is None or source in ("catalogue", "none", "mtp"):
        return None
    return spec.source or None


def resolve(spelling: str | None, role: Role = "model", purpose: Purpose = "plan", *,
            quant: str | None = None, target: ModelSpec | None = None, target_path: str | None = None) -> Resolved:
    """What `spelling` names as a `role`, for a `purpose` (see the module's docstring). `quant` picks
    a catalogue model's quantisation (plan, model); `target` is the model a draft or head is planned
    beside: None -> the catalogue's pairing for it, and the widths are checked against it.
    `target_path`: the local model a head runs beside (run, head): `auto` (or None) pairs one with
    it, and any head is checked against it before anything loads."""
    if role not in ROLES or purpose not in PURPOSES:
        raise ValueError(f"resolve: role {role!r} / purpose {purpose!r}")
    if purpose == "run" and role == "head" and target_path is not None:
        path, note, source = _run_head(spelling, target_path)
        return Resolved(spelling, role, purpose, path, None, source, note)
    source = source_of(spelling)
    if purpose == "run":
        return Resolved(spelling, role, purpose, _run_path(spelling, role), None, source)
    if role == "model":
        if spelling is None:
            spelling = str(smollm2_path())
        spec = _model_spec(spelling, quant)
    elif target is None:
        raise ValueError("resolve: planning a draft needs its target")
    else:
        source = "catalogue" if is_auto(spelling) else source  # the catalogue's pairing for the target
        spec = _draft_spec(spelling, target)
    return Resolved(spelling, role, purpose, _read_from(spec, source), spec, source)


__all__ = ["PURPOSES", "ROLES", "Resolved", "check_pairing", "is_auto", "resolve", "source_of"]
