"""The output directory of `homespec draft train`: what makes a directory a training run, and the
checks that keep a run from writing anywhere else.

A run's first write is its marker, OUT/homespec-run.json. `--out` may name

- a new directory (its parents are created), or an empty one (hidden files aside: homespec
  writes none under a fixed name);
- a training run: a directory holding the marker, or homespec's training data in OUT/data
  (a data/manifest.json, which is also how a run is seeded with another run's data: link or
  copy that run's data/ into the new --out). Rerunning resumes it.

Anything else (a file, a directory of other files) is refused before any data is generated or
any model loaded: a run never mixes its files with a user's, nor overwrites one. Within a run,
each entry homespec writes must be of its kind (OUT/data a directory, OUT/config.json a file...).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from homespec import __version__
from homespec.atomic import nearest_existing, write_text
from homespec.errors import HomespecError, UsageError

MARKER = "homespec-run.json"
KIND = "homespec draft train"
# every entry a run writes at its top level (layout: homespec.train.api), True for a directory
ENTRIES = {MARKER: False, "data": True, "vocab.npz": False, "train": True, "config.json": False,
           "model.safetensors": False, "acceptance.json": False}
_NEW = "choose a new or empty directory"


def check_out(out: str | os.PathLike[str]) -> None:
    """Refuse an --out that is not a new or empty directory nor a training run (which the run
    then resumes). Reads only: nothing is created."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file, not a directory",
                         hint=f"{_NEW} for the run, e.g. --out {_free(out.parent)}")
    if not out.exists():
        _check_creatable(out)
    elif is_run(out):
        _check_entries(out)
    elif any(not p.name.startswith(".") for p in _entries(out)):
        raise UsageError(f"--out {out} holds other files and is not a homespec training run",
                         hint=f"{_NEW}, e.g. --out {_free(out)}; to resume a run, name the directory it was started in")


def claim_out(out: str | os.PathLike[str]) -> None:
    """Create --out (checked by check_out) and write the marker first, before anything else."""
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        if not (out / MARKER).is_file():
            write_text(out / MARKER, json.dumps({"kind": KIND, "homespec": __version__}, indent=1) + "\n")
    except OSError as exc:
        raise HomespecError(f"cannot create the run directory {out} ({exc.strerror or exc})",
                            hint=f"{_NEW} you can write to") from exc


def is_run(d: Path) -> bool:
    """The directory holds homespec's marker, or homespec's training data in data/."""
    return _read_json(d / MARKER, "kind") == KIND or _read_json(d / "data" / "manifest.json", "shards") is not None


def _entries(d: Path) -> list[Path]:
    try:
        return list(d.iterdir())
    except OSError as exc:
        raise UsageError(f"--out {d}: cannot list the directory ({exc.strerror or exc})",
                         hint=f"{_NEW} you can read and write") from exc


def _read_json(path: Path, key: str):
    """`key` of the JSON object at `path`; None when there is none (no file, not JSON, no key)."""
    try:
        obj = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return obj.get(key) if isinstance(obj, dict) else None


def _check_entries(out: Path) -> None:
    for name, is_dir in ENTRIES.items():
        p = out / name
        if p.is_symlink() and not p.exists():
            raise UsageError(f"--out {out}: {p} is a broken link, where the run writes its {name}",
                             hint=f"remove the link or point it at the right place, or {_NEW} for --out")
        if p.exists() and p.is_dir() != is_dir:
            kind = "a directory" if p.is_dir() else "a file"
            raise UsageError(f"--out {out}: {p} is {kind}, where the run writes its {name}",
                             hint=f"move {p} out of the way, or {_NEW} for --out")


def _check_creatable(out: Path) -> None:
    """The nearest existing ancestor of a new --out is a directory homespec can write in."""
    parent = nearest_existing(out)
    if not parent.is_dir():
        raise UsageError(f"--out {out}: {parent} is a file, not a directory",
                         hint=f"{_NEW} for the run, e.g. --out {_free(parent.parent)}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"--out {out}: cannot create a directory in {parent} (permission denied)",
                         hint=f"{_NEW} you can write to")


def _free(parent: Path) -> Path:
    """A directory name under `parent` that does not exist yet, for the hint."""
    for n in range(1, 100):
        p = parent / ("head" if n == 1 else f"head-{n}")
        if not p.exists():
            return p
    return parent / "new-head"
