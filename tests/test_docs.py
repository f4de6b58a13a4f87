"""The documents the code cites exist: every docs/ page it names, and every correctness contract."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted([*(ROOT / "homespec").rglob("*.py"), *(ROOT / "tools").rglob("*.py"), *(ROOT / "scripts").glob("*.py"),
                  *(ROOT / "benchmarks").rglob("*.py")])


def _contracts() -> set[int]:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("## Correctness contracts", 1)[1].split("\n## ", 1)[0]
    return {int(n) for n in re.findall(r"^(\d+)\. \*\*", section, re.M)}


def test_architecture_lists_the_correctness_contracts():
    assert _contracts() == {1, 2, 3, 4, 5}


def test_cited_contracts_name_their_document_and_exist():
    contracts = _contracts()
    for path in SOURCES:
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"contract\s+(\d+)", text):
            cited = text[max(0, m.start() - 40):m.end()]
            assert re.search(r"docs/architecture\.md,\s+contract\s+\d+$", cited), (path, cited)
            assert int(m.group(1)) in contracts, (path, cited)


def test_cited_docs_pages_exist():
    # a backtick before "docs/" marks another project's file (ggml `docs/gguf.md`)
    for path in SOURCES:
        for page in re.findall(r"(?<![`\w/])docs/[\w/.-]*\w\.md", path.read_text(encoding="utf-8")):
            assert (ROOT / page).is_file(), (path, page)
