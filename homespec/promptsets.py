"""homespec's prompt sets at run time: the PromptItem type, the packaged JSONL splits (draft-head
training data, dev and held-out test sets) and a user's own prompts file.

The packaged files are written by a seeded generator that lives outside the package
(tools/promptgen, run by benchmarks/suites/build_prompts.py) and is never copied from public benchmarks;
docs/prompts.md describes the design and the split rule."""

from __future__ import annotations

import json
import lzma
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from homespec import userfiles
from homespec.errors import HomespecError, UsageError

SPLITS = ("train", "dev", "test", "long", "edit", "edit-dev")
DATA_DIR = Path(__file__).resolve().parent / "data" / "prompts"
# Sets stored xz-compressed: train is 7.6 MiB of JSONL and 0.7 MiB as .xz, which keeps the source
# tree small enough to travel in few calls to a lent GPU machine (docs/gpu.md, "What is carried")
COMPRESSED = frozenset({"train"})


@dataclass(frozen=True, slots=True)
class PromptItem:
    """One prompt. `turns` holds the user turns only; a multi-turn item has the target's replies
    generated between them, so a single-turn item is simply a 1-tuple."""

    id: str
    category: str
    turns: tuple[str, ...]

    @property
    def prompt(self) -> str:
        """The first (for single-turn items, the only) user turn."""
        return self.turns[0]

    @property
    def is_multi_turn(self) -> bool:
        return len(self.turns) > 1


def _bad_line(path: Path, lineno: int, why: str) -> UsageError:
    return UsageError(
        f"{path}:{lineno}: {why}",
        hint='each line must be a JSON object with "prompt" (a string) or "turns" (a list of strings)',
    )


def _parse_line(path: Path, lineno: int, line: str, default_category: str) -> PromptItem:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise _bad_line(path, lineno, f"not valid JSON ({exc.msg})") from None
    if not isinstance(obj, dict):
        raise _bad_line(path, lineno, "not a JSON object")
    if "turns" in obj:
        turns = obj["turns"]
        if (
            not isinstance(turns, list)
            or not turns
            or not all(isinstance(t, str) and t.strip() for t in turns)
        ):
            raise _bad_line(path, lineno, '"turns" must be a non-empty list of non-empty strings')
        texts: Sequence[str] = turns
    elif "prompt" in obj:
        prompt = obj["prompt"]
        if not isinstance(prompt, str) or not prompt.strip():
            raise _bad_line(path, lineno, '"prompt" must be a non-empty string')
        texts = [prompt]
    else:
        raise _bad_line(path, lineno, 'has neither "prompt" nor "turns"')
    item_id = obj.get("id", f"{Path(path.name.removesuffix('.xz')).stem}-{lineno}")
    category = obj.get("category", default_category)
    if not isinstance(item_id, (str, int)) or not isinstance(category, str):
        raise _bad_line(path, lineno, '"id" must be a string and "category" a string')
    return PromptItem(id=str(item_id), category=category, turns=tuple(texts))


def read_text(path: Path) -> str:
    """A packaged JSONL file's text; a name ending .xz is decompressed on the way (lzma)."""
    data = lzma.decompress(path.read_bytes()) if path.suffix == ".xz" else path.read_bytes()
    return data.decode("utf-8")


def read_xz_lines(path: Path, limit: int) -> list[tuple[int, str]]:
    """(line number, text) of each line of an xz-compressed UTF-8 file, at most `limit` bytes once
    decompressed (a larger one is refused, never expanded whole into memory)."""
    d = lzma.LZMADecompressor()
    try:
        data = d.decompress(path.read_bytes(), max_length=limit + 1)
    except FileNotFoundError:
        raise UsageError(f"prompt file {path} does not exist", hint="check the path") from None
    except lzma.LZMAError:
        raise UsageError(f"prompt file {path} is not valid xz data", hint="compress it with `xz`, or pass the .jsonl") from None
    if len(data) > limit:
        raise UsageError(f"prompt file {path} holds more than {limit >> 20} MiB once decompressed",
                         hint="split it into smaller files")
    try:
        return list(enumerate(data.decode("utf-8").splitlines(), start=1))
    except UnicodeDecodeError:
        raise UsageError(f"prompt file {path} is not UTF-8 text", hint="save it as UTF-8 JSONL") from None


def read_prompts_file(path: str | os.PathLike[str], default_category: str = "user",
                      flag: str | None = "--prompts") -> list[PromptItem]:
    """Read a user's JSONL prompt file, streamed and bounded (homespec.userfiles: a FIFO, a device,
    a directory or a missing file is refused before it is read), or one compressed with xz
    (`.jsonl.xz`, bounded once decompressed). Blank lines are skipped; "id" and "category" are
    optional."""
    name = os.fspath(path)
    if name.endswith(".xz"):
        if userfiles.regular(name, flag, userfiles.PROMPTS).stat().st_size > userfiles.PROMPTS.limit:
            raise UsageError(f"prompt file {name} is larger than {userfiles.PROMPTS.limit >> 20} MiB",
                             hint="split it into smaller files")
        numbered = read_xz_lines(Path(name), userfiles.PROMPTS.limit)
    else:
        numbered = userfiles.lines(name, flag, userfiles.PROMPTS, userfiles.PROMPT_LINE)
    items = [
        _parse_line(Path(name), lineno, line, default_category)
        for lineno, line in numbered
        if line.strip()
    ]
    if not items:
        raise UsageError(f"prompt file {name} holds no prompts", hint='add lines like {"prompt": "..."}')
    return items


def load_prompts(split: str) -> list[PromptItem]:
    """The packaged prompt set `split` written by benchmarks/suites/build_prompts.py: train, dev, test, long, or
    the edit set (edit: test families, edit-dev: dev families; docs/prompts.md, "The edit set")."""
    if split not in SPLITS:
        raise UsageError(f"unknown prompt split {split!r}", hint=f"use one of: {', '.join(SPLITS)}")
    path = split_path(split)
    if not path.is_file():
        raise HomespecError(
            f"the packaged prompt set {path} is missing",
            hint="regenerate it with `python -m benchmarks build_prompts`",
        )
    return read_prompts_file(path, default_category=split, flag=None)


def split_path(split: str) -> Path:
    """Where the packaged set `split` is stored: `<split>.jsonl`, or `<split>.jsonl.xz` for COMPRESSED."""
    return DATA_DIR / (f"{split}.jsonl.xz" if split in COMPRESSED else f"{split}.jsonl")
