"""Build the packaged prompt sets: sample every pool per split, give ids, shuffle, write JSONL; and
write the material long-context prompts are composed from at run time (long_material.json).

Deterministic: the same seed gives byte-identical files (no clock, no hash(), no set iteration order
reaches the output). See docs/prompts.md for the design and the split rule.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from homespec.longprompts.material import MATERIAL_PATH
from homespec.promptsets import DATA_DIR, PromptItem, split_path
from tools.promptgen import chat, coding, edits, extraction, maths, multiturn, rewrite, writing
from tools.promptgen.design import DEV, TEST, TRAIN, Draft, Pool, sample_pool, template_splits, topic_splits
from tools.promptgen.jsonl import write_file, write_prompts_file
from tools.promptgen.long import long_drafts, long_prompts, source_json

DEFAULT_SEED = 20240611

CATEGORY_POOLS: dict[str, tuple[Pool, ...]] = {
    "chat": chat.POOLS,
    "coding": coding.POOLS,
    "maths": maths.POOLS,
    "writing": writing.POOLS,
    "extraction": extraction.POOLS,
    "rewrite": rewrite.POOLS,
    "multiturn": (multiturn.POOL,),
}

# Prompts per category and split. Train leans towards what a draft head sees most in home use
# (chat, code, maths) but keeps every kind well represented; dev and test are balanced.
QUOTAS: dict[str, dict[str, int]] = {
    TRAIN: {"chat": 4200, "coding": 4200, "maths": 3800, "writing": 3000, "extraction": 2400, "rewrite": 2400,
            "multiturn": 2400},
    DEV: {c: 75 for c in CATEGORY_POOLS},
    TEST: {c: 75 for c in CATEGORY_POOLS},
}
# Long items inside train (for training on long contexts), as an estimated token range; the long set
# proper is built by long_prompts() from the test families.
TRAIN_LONG = (400, (400, 2000))
LONG_SAMPLE_TOKENS = (1024, 2048, 4096, 8192)
LONG_SAMPLE_PER_SIZE = 6
# The edit set (edit.jsonl from test families, edit-dev.jsonl from dev ones): prompts per kind.
EDIT_PER_KIND = 12
EDIT_FILES = {TEST: "edit.jsonl", DEV: "edit-dev.jsonl"}


@dataclass(frozen=True, slots=True)
class BuiltSplit:
    """A split's drafts (with their families, for checks) and the items written to disk."""

    drafts: tuple[Draft, ...]
    items: tuple[PromptItem, ...]


def check_family_consistency(pools: Sequence[Pool]) -> None:
    """A topic or template family that two pools share must land in the same split in both."""
    seen: dict[str, tuple[str, str]] = {}
    for pool in pools:
        for kind, splits in (("topic", topic_splits(pool)), ("template", template_splits(pool))):
            for key, split in splits.items():
                first = seen.setdefault(f"{kind}:{key}", (split, pool.name))
                if first[0] != split:
                    raise RuntimeError(f"{kind} {key} is {first[0]} in {first[1]} but {split} in {pool.name}")


def _sample_category(pools: Sequence[Pool], split: str, n: int, seed: int, seen: set[str]) -> list[Draft]:
    """Split `n` over the pools by share; a pool that runs out of distinct prompts hands its shortfall
    to the next one, and a last pass tops up from all of them."""
    out: list[Draft] = []
    carry = 0
    for pool in pools:
        want = round(n * pool.share) + carry
        got = sample_pool(pool, split, want, seed, seen)
        carry = want - len(got)
        out += got
    for round_ in range(3):
        if len(out) >= n:
            break
        for pool in pools:
            missing = n - len(out)
            if missing <= 0:
                break
            out += sample_pool(pool, split, missing, seed + 1000 * (round_ + 1), seen)
    return out[:n]


def build_split(split: str, seed: int = DEFAULT_SEED) -> BuiltSplit:
    seen: set[str] = set()
    drafts: list[Draft] = []
    for category, pools in CATEGORY_POOLS.items():
        drafts += _sample_category(pools, split, QUOTAS[split][category], seed, seen)
    if split == TRAIN:
        count, tokens = TRAIN_LONG
        drafts += long_drafts(TRAIN, count, tokens, seed)
    numbered: list[tuple[Draft, PromptItem]] = []
    per_category: Counter[str] = Counter()
    for draft in drafts:
        index = per_category[draft.category]
        per_category[draft.category] += 1
        numbered.append((draft, PromptItem(f"{split}-{draft.category}-{index:05d}", draft.category, draft.turns)))
    # shuffled so that any prefix of a file is a fair mix of categories
    random.Random(f"{seed}:{split}:order").shuffle(numbered)
    return BuiltSplit(tuple(d for d, _ in numbered), tuple(i for _, i in numbered))


def build_long_sample(seed: int = DEFAULT_SEED) -> list[PromptItem]:
    items: list[PromptItem] = []
    for tokens in LONG_SAMPLE_TOKENS:
        items += long_prompts(tokens, LONG_SAMPLE_PER_SIZE, seed + tokens, split=TEST)
    return items


def build_edit(split: str, seed: int = DEFAULT_SEED) -> list[PromptItem]:
    """The edit set of `split`: EDIT_PER_KIND prompts of each kind (edits.KINDS), ids by kind."""
    seen: set[str] = set()
    items: list[PromptItem] = []
    for kind in edits.KINDS:
        pools = [p for p in edits.POOLS if p.category == kind]
        drafts = _sample_category(pools, split, EDIT_PER_KIND, seed, seen)
        items += [PromptItem(f"edit-{split}-{kind}-{i:03d}", kind, d.turns) for i, d in enumerate(drafts)]
    random.Random(f"{seed}:{split}:edit-order").shuffle(items)  # any prefix mixes the kinds
    return items


def all_pools() -> tuple[Pool, ...]:
    return tuple(p for pools in CATEGORY_POOLS.values() for p in pools) + edits.POOLS


def write_all(out_dir: Path = DATA_DIR, seed: int = DEFAULT_SEED) -> dict[str, tuple[int | None, int]]:
    """Write train/dev/test/long.jsonl, the edit sets and the long-context material into `out_dir`; returns
    {file name: (prompts, bytes)}, with no prompt count for the material."""
    check_family_consistency(all_pools())
    out_dir = Path(out_dir)
    written: dict[str, tuple[int | None, int]] = {}
    for split in (TRAIN, DEV, TEST):
        items = build_split(split, seed).items
        name = split_path(split).name  # train.jsonl.xz: stored compressed (homespec.promptsets.COMPRESSED)
        written[name] = (len(items), write_prompts_file(out_dir / name, items))
    long_items = build_long_sample(seed)
    written["long.jsonl"] = (len(long_items), write_prompts_file(out_dir / "long.jsonl", long_items))
    for split, name in EDIT_FILES.items():
        edit_items = build_edit(split, seed)
        written[name] = (len(edit_items), write_prompts_file(out_dir / name, edit_items))
    written[MATERIAL_PATH.name] = (None, write_file(out_dir / MATERIAL_PATH.name, source_json()))
    return written
