"""The draft vocabulary: the target tokens the head may propose.

EAGLE-3 (SafeAILab `traineagle3`) keeps the most frequent target tokens of the training data and
stores two maps with the head: `d2t` (int64 per draft id: target id = draft id + d2t[draft id])
and `t2d` (bool per target id: is it in the draft vocabulary). Draft ids follow ascending target
ids, so d2t is non-decreasing, as in the published heads.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from homespec.errors import UsageError
from homespec.train.shards import Shard


@dataclass(frozen=True, slots=True)
class DraftVocab:
    ids: np.ndarray  # [V_draft] int64 target ids, ascending
    n_target: int  # the target's vocabulary size
    coverage: float  # share of counted tokens the draft vocabulary holds

    @property
    def d2t(self) -> np.ndarray:
        """[V_draft] int64 offsets: target id = draft id + d2t[draft id]."""
        return self.ids - np.arange(len(self.ids), dtype=np.int64)

    @property
    def t2d(self) -> np.ndarray:
        """[V_target] bool: the target id has a draft id."""
        mask = np.zeros(self.n_target, dtype=bool)
        mask[self.ids] = True
        return mask

    @property
    def size(self) -> int:
        return int(len(self.ids))


def count_tokens(shards: Sequence[Shard], n_target: int, include_prompts: bool = False) -> np.ndarray:
    """[V_target] int64 occurrences of each target id in the replies (and prompts if asked)."""
    counts = np.zeros(n_target, dtype=np.int64)
    for sh in shards:
        toks = np.asarray(sh.tokens)
        if not include_prompts:
            toks = toks[np.asarray(sh.generated)]
        counts += np.bincount(toks, minlength=n_target)[:n_target]
    return counts


def build_vocab(counts: np.ndarray, size: int) -> DraftVocab:
    """The `size` most frequent ids (ties and unseen ids by ascending id, so the choice is stable)."""
    n_target = int(counts.shape[0])
    if not 1 <= size <= n_target:
        raise UsageError(f"--draft-vocab {size} is outside 1..{n_target} (the target's vocabulary)",
                         hint="8192 or 16384 are usual; use the target's vocabulary size for no reduction")
    order = np.lexsort((np.arange(n_target), -counts))  # by count desc, then id asc
    return vocab_of(order[:size], counts)


def vocab_of(ids: np.ndarray, counts: np.ndarray) -> DraftVocab:
    """The draft vocabulary holding `ids` (any order), its coverage measured on `counts`."""
    ids = np.sort(np.asarray(ids)).astype(np.int64)
    total = int(counts.sum())
    coverage = float(counts[ids].sum() / total) if total else 0.0
    return DraftVocab(ids=ids, n_target=int(counts.shape[0]), coverage=coverage)


def save_vocab(vocab: DraftVocab, path: str | os.PathLike[str]) -> None:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp.npz")
    np.savez(tmp, ids=vocab.ids, n_target=np.int64(vocab.n_target), coverage=np.float64(vocab.coverage))
    os.replace(tmp, path)
