"""The one results format: every suite's JSON has the same top-level fields, written by the runner.

    {"suite": "host_step", "date": "2026-12-06T13:50:02Z",
     "machine": {"cpu": "...", "cores": 2, "gpu": ["NVIDIA H100 80GB HBM3"]},
     "command": ["python", "-m", "benchmarks", "host_step", "--drafter", "head"],
     "rows": [...], "ratios": {...}, "detail": {...}}

`rows` are the suite's measured lines (one dict each: a round, a prompt, a method), `ratios` the side-by-side
figures it reports (name -> number), `detail` its settings and anything else it records. A suite returns a
`Result`; it never writes the file itself.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

FIELDS = ("suite", "date", "machine", "command", "rows", "ratios", "detail")


@dataclass
class Result:
    """What a suite measured: rows, the ratios it reports, and its settings."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    ratios: dict[str, float] = field(default_factory=dict)
    detail: dict[str, Any] = field(default_factory=dict)
    status: int = 0  # the exit status the suite asks for (1: a check it makes failed)


def document(suite: str, command: list[str], machine: dict[str, Any], result: Result) -> dict[str, Any]:
    """The results file's content, its fields in FIELDS order."""
    date = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"suite": suite, "date": date, "machine": machine, "command": command,
            "rows": result.rows, "ratios": result.ratios, "detail": result.detail}


def write(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    print(f"results: {path}", file=sys.stderr)


def load(path: Path) -> dict[str, Any]:
    """A results file, or the bare JSON an older run of the same measurement wrote (docs/results/20*/)."""
    doc = json.loads(path.read_text())
    return doc if isinstance(doc, dict) else {"rows": doc}


def payload(doc: dict[str, Any]) -> dict[str, Any]:
    """A suite's own fields: `detail` with `rows` beside it (a file without the envelope: itself)."""
    if not all(k in doc for k in ("suite", "rows", "detail")):
        return doc
    return {**doc["detail"], "rows": doc["rows"], "ratios": doc["ratios"]}
