"""A head's recorded acceptance: how often its drafts were accepted on held-out prompts.

`homespec draft train` measures the finished head on the dev split and writes `acceptance.json`
beside config.json (other EAGLE-3 loaders ignore the file). The stability guard uses it as its
prior: with the step costs measured at load it predicts whether speculation can pay before it
spends time finding out (homespec.speculative.guard).

    {"split": "dev", "prompts": 4, "max_new_tokens": 64, "backend": "llamacpp",
     "shapes": [{"depth": 6, "topk": 8, "total": 48, "tau": 2.03, "steps": 130,
                 "at_least": [0.62, 0.31, ...]}, ...]}

at_least[d-1] is the share of speculative steps that accepted at least d draft tokens, so
tau = 1 + sum(at_least).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Sequence

from homespec.atomic import write_text
from homespec.types import AcceptanceRecord

FILE = "acceptance.json"


def write_record(head_dir: str | os.PathLike[str], shapes: Sequence[dict[str, Any]], **about: Any) -> Path:
    path = Path(head_dir) / FILE
    write_text(path, json.dumps({**about, "shapes": list(shapes)}, indent=1) + "\n")
    return path


def read_records(head_dir: str | os.PathLike[str]) -> tuple[AcceptanceRecord, ...]:
    """Every usable shape of a head's record, as typed values (empty without a readable file)."""
    path = Path(head_dir) / FILE
    try:
        data = json.loads(path.read_text())
        return tuple(
            AcceptanceRecord(int(s["depth"]), int(s["topk"]), int(s["total"]), tuple(float(a) for a in s["at_least"]),
                             int(s.get("steps", 0)), str(path))
            for s in data["shapes"] if s.get("steps", 0) > 0 and s.get("at_least") and int(s["total"]) >= 2
        )
    except (OSError, ValueError, KeyError, TypeError):
        return ()


def read_prior(head_dir: str | os.PathLike[str], depth: int, topk: int, total: int) -> tuple[float, ...] | None:
    """P(accepted >= d) for the closest recorded shape that does not understate this one, or None.

    The same shape first; else the same kind (chain when topk == 1, tree otherwise) with the
    nearest node count; else, for a chain, a recorded tree (a tree accepts at least what its
    top-1 path does, so the prior errs towards trying speculation). A tree never borrows a
    chain's record (that would understate it and could stop speculation that pays)."""
    try:
        data = json.loads((Path(head_dir) / FILE).read_text())
        shapes = [s for s in data["shapes"] if s.get("steps", 0) > 0 and s.get("at_least")]
    except (OSError, ValueError, KeyError, TypeError):
        return None

    def key(s: dict[str, Any]) -> tuple[bool, int]:  # the same shape first, then the nearest size
        return (int(s["depth"]), int(s["topk"]), int(s["total"])) != (depth, topk, total), abs(int(s["total"]) - total)

    chain = topk == 1
    same = [s for s in shapes if (int(s["topk"]) == 1) == chain]
    pool = same or ([s for s in shapes if int(s["topk"]) > 1] if chain else [])
    if not pool:
        return None
    best = min(pool, key=key)
    return tuple(float(a) for a in best["at_least"])
