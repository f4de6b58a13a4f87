"""Writing the generated sets: one JSON object per line, the same bytes for the same items."""

from __future__ import annotations

import json
import lzma
from collections.abc import Iterable
from pathlib import Path

from homespec.atomic import write_bytes
from homespec.promptsets import PromptItem


def item_to_json(item: PromptItem) -> str:
    """One JSONL line: {"id","category","prompt"} or {"id","category","turns"}. Keys in a fixed
    order and ensure_ascii so the same items always give the same bytes."""
    obj: dict[str, object] = {"id": item.id, "category": item.category}
    if item.is_multi_turn:
        obj["turns"] = list(item.turns)
    else:
        obj["prompt"] = item.turns[0]
    return json.dumps(obj, ensure_ascii=True)


def write_prompts_file(path: Path, items: Iterable[PromptItem]) -> int:
    """Write items as JSONL atomically (temp file + os.replace); returns the byte count. A path
    ending .xz is compressed (xz preset 9e: the same items give the same bytes)."""
    data = "".join(item_to_json(it) + "\n" for it in items).encode("utf-8")
    if Path(path).suffix == ".xz":
        data = lzma.compress(data, preset=9 | lzma.PRESET_EXTREME)
    return write_file(path, data)


def write_file(path: Path, data: bytes) -> int:
    """Write `data` atomically (homespec.atomic creates the folder); returns the byte count."""
    write_bytes(path, data)
    return len(data)
