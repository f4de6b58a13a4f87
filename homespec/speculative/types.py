"""Names that used to live here, each now in its module: `DraftTree` (speculative/tree.py),
`Verdict` (speculative/verify.py), `Step` (speculative/loop.py) and the `Drafter` protocol
(speculative/drafters/base.py). Importing them from here still works, and loads nothing until a
name is used (Verdict's module imports torch)."""

from __future__ import annotations

import importlib

_HOMES = {
    "DraftTree": "homespec.speculative.tree",
    "Verdict": "homespec.speculative.verify",
    "Step": "homespec.speculative.loop",
    "Drafter": "homespec.speculative.drafters.base",
}
__all__ = sorted(_HOMES)


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)
