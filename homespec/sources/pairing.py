"""Which EAGLE head drafts for a model, decided before anything loads (docs/cli.md, "Draft heads").

`pair(model_path)` is what `--draft auto` (the default) means:

1. the embedded model drafts with the head shipped for it;
2. an `eagle3-*.gguf` beside the model (or in its hub snapshot) whose target identity is the model's:
   a sidecar carries its target's tokenizer, so it is matched exactly;
3. a catalogue head made for a model of this identity (architecture, layer count, hidden size,
   vocabulary and, where the catalogue records it, the tokenizer) whose target the model is named
   after, or whose recorded tokenizer is the model's: the first such head on this machine (Hugging
   Face cache, or shipped with homespec) in the catalogue's order of preference;
4. a head in homespec's store of this identity whose tokenizer is the model's.

None of them here: no head (the run drafts with its lookups), and when the catalogue knows one,
`Pairing.note` is the one line that says how to fetch it. `check(head, target)` refuses a head
given by hand that does not fit, naming the difference (a UsageError: exit 2).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from homespec.catalog import load_catalog
from homespec.embedded import shipped_head
from homespec.errors import HomespecError, UsageError
from homespec.sources.heads_here import local_copy, sidecars, store_heads
from homespec.sources.identity import (
    HeadIdentity, TargetIdentity, entry_identity, mismatch, name_matches, path_identity, target_identity,
)


@dataclass(frozen=True, slots=True)
class Pairing:
    head: Path | None  # the head to draft with (a directory or an eagle3 .gguf); None: lookups only
    entry: str | None  # its catalogue id, when the catalogue knows it (also when it is not here)
    where: str  # shipped | sidecar | hf-cache | store | none
    note: str | None = None  # one line for the user: the command that fetches the catalogue's head


def _fits(head: HeadIdentity, target: TargetIdentity) -> bool:
    return mismatch(head, target) is None


def _path_fits(path: Path, target: TargetIdentity, *, exact: bool) -> bool:
    """A head on disk fits when its identity does; `exact`: its tokenizer must be known and the model's."""
    try:
        head = path_identity(path)
    except (HomespecError, OSError, ValueError):  # an unreadable file beside a model is not a head for it
        return False
    if not _fits(head, target):
        return False
    return not exact or (head.tokenizer is not None and head.tokenizer == target.tokenizer)


def candidates(target: TargetIdentity) -> list[dict]:
    """Catalogue heads made for this model, in the catalogue's order of preference: the identity
    fits, and the model is named after the head's target or has the vocabulary the head records."""
    out = []
    for entry in load_catalog().draft_entries:
        head = entry_identity(entry)
        if not _fits(head, target):
            continue
        if name_matches(head, target) or (head.tokenizer is not None and head.tokenizer == target.tokenizer):
            out.append(entry)
    return out


def fetch_note(entry: dict, target: TargetIdentity) -> str:
    """The one line a run prints when the catalogue's head for the model is not on this machine."""
    what = entry["repo"] + (f"/{entry['file']}" if entry.get("file") else "")
    return (f"note: {entry['id']} ({what}) drafts for {Path(target.path).name} but is not on this machine; "
            f"drafting with prompt lookups. Fetch it with: homespec pull {entry['id']}")


def pair(model_path: str | os.PathLike) -> Pairing:
    """The head `--draft auto` drafts with for the local model at `model_path` (see the module)."""
    shipped = shipped_head(str(model_path))
    if shipped is not None:
        entry = next((e["id"] for e in load_catalog().draft_entries if e.get("acceptance") == shipped.name), None)
        return Pairing(shipped, entry, "shipped")
    target = target_identity(model_path)

    for sidecar in sidecars(model_path):
        if _path_fits(sidecar, target, exact=True):
            return Pairing(sidecar, None, "sidecar")
    found = candidates(target)
    for entry in found:
        local = local_copy(entry)
        if local is not None and _path_fits(local, target, exact=False):
            return Pairing(local, entry["id"], "shipped" if not entry.get("repo") else "hf-cache")
    for head in store_heads():
        if _path_fits(head, target, exact=True):
            return Pairing(head, None, "store")
    fetchable = [e for e in found if e.get("repo")]
    if fetchable:
        return Pairing(None, fetchable[0]["id"], "none", fetch_note(fetchable[0], target))
    return Pairing(None, None, "none")


def refuse(head_name: str, target: TargetIdentity, why: str) -> UsageError:
    return UsageError(f"the draft head {head_name} does not fit {Path(target.path).name}: {why}",
                      hint="pass a head made for this model, or --draft auto to let homespec pick one "
                           "(`homespec models` lists the heads here and the model each pairs with)")


def check_entry(entry: dict, target: TargetIdentity) -> None:
    why = mismatch(entry_identity(entry), target)
    if why is not None:
        raise refuse(entry["id"], target, why)


def check_path(path: str | os.PathLike, target: TargetIdentity) -> None:
    """A head on disk (directory or eagle3 .gguf) given as --draft: refused unless it fits."""
    why = mismatch(path_identity(path), target)
    if why is not None:
        raise refuse(str(path), target, why)


__all__ = ["Pairing", "candidates", "check_entry", "check_path", "fetch_note", "pair", "refuse"]
