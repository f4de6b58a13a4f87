"""Prompt-lookup drafting (Saxena 2023, "prompt lookup decoding"): no model at all.

The newest n tokens are searched for earlier in the context; what followed the earlier
occurrence whose match is longest (measured backwards, homespec.speculative.matching; the latest
among equals) is proposed. Long n first, so a longer (more specific) match wins. With
`candidates > 1` the continuations of several earlier occurrences are merged into a tree.

`offers` is the same lookup as the guard sees it (homespec.speculative.drafters.lookup): the chain and
the match length that found it (the key of its acceptance statistics, homespec.speculative.choice); a
lookup that finds nothing offers nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from homespec.contracts.drafter import DraftShape, Offer, ShapeLimits
from homespec.contracts.tree import DraftTree
from homespec.speculative.drafters.lookup import Lookup
from homespec.speculative.matching import Match

if TYPE_CHECKING:
    from homespec.contracts.backend import Forward


def find_continuations(seq: Sequence[int], *, max_ngram: int, min_ngram: int, num_draft: int, candidates: int) -> list[list[int]]:
    """Up to `candidates` distinct continuations of the newest n-gram, best first.

    Occurrences are ranked by n (longest first), then recency (latest first)."""
    arr = np.asarray(seq, dtype=np.int64)
    out: list[list[int]] = []
    seen: set[tuple[int, ...]] = set()
    for n in range(min(max_ngram, len(arr) - 1), min_ngram - 1, -1):
        suffix = arr[-n:]
        # Windows of arr[:-1] start at 0 .. len-1-n, so each match has at least one token after it
        # and the suffix itself is excluded.
        windows = np.lib.stride_tricks.sliding_window_view(arr[:-1], n)  # [len-n, n]
        starts = np.flatnonzero((windows == suffix).all(axis=1))[::-1]
        for s in starts:
            cont = arr[s + n : s + n + num_draft].tolist()
            key = tuple(cont)
            if key in seen or any(tuple(c[: len(cont)]) == key for c in out):
                continue
            seen.add(key)
            out.append(cont)
            if len(out) >= candidates:
                return out
    return out


def merge_paths(root: int, continuations: list[list[int]]) -> DraftTree:
    """A trie of the continuations under `root` (shared prefixes share nodes)."""
    tokens, parents = [root], [-1]
    child_of: dict[tuple[int, int], int] = {}
    for cont in continuations:
        node = 0
        for tok in cont:
            nxt = child_of.get((node, tok))
            if nxt is None:
                nxt = len(tokens)
                tokens.append(tok)
                parents.append(node)
                child_of[(node, tok)] = nxt
            node = nxt
    return DraftTree.of(tokens, parents)  # probs 1.0: a lookup is deterministic


class NgramDrafter(Lookup):
    name = "ngram"

    def __init__(self, max_ngram: int = 3, num_draft: int = 8, *, min_ngram: int = 1, candidates: int = 1):
        if not 1 <= min_ngram <= max_ngram or num_draft < 1 or candidates < 1:
            raise ValueError("need 1 <= min_ngram <= max_ngram, num_draft >= 1 and candidates >= 1")
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self.num_draft, self.candidates = num_draft, candidates

    def begin(self, prompt: Sequence[int], forward: "Forward", *, kept: int = 0) -> None:
        pass  # stateless: the context is searched afresh each step

    def trim(self, keep: int) -> int:
        return keep  # nothing of its own to cut

    def propose(self, root: int, context: Sequence[int]) -> DraftTree:
        if self.candidates == 1:
            found = self.offers(root, context)
            return merge_paths(int(root), [list(found[0].tokens)] if found else [])
        seq = list(context) + [int(root)]
        conts = find_continuations(
            seq, max_ngram=self.max_ngram, min_ngram=self.min_ngram, num_draft=self.num_draft, candidates=self.candidates
        )
        return merge_paths(int(root), conts)

    def offer_in(self, seq: np.ndarray, found: list[Match], floor: int = 1) -> tuple[Offer, ...]:
        """The continuation of the longest earlier match (`found`, best first, over `seq`: context
        + root)."""
        if not found:
            return ()
        best = found[0]
        return (Offer(self.name, tuple(seq[best.end:best.end + self.num_draft].tolist()), best.length),)

    def accept(self, tokens: Sequence[int], features: np.ndarray | None, next_token: int) -> None:
        pass

    def reset(self) -> None:
        pass

    # --- the shape the guard may set (contracts/drafter.py) ----------------------------------

    @property
    def shape(self) -> DraftShape:
        """depth: tokens per continuation; topk: continuations merged; total: the largest trie."""
        return DraftShape(self.num_draft, self.candidates, 1 + self.num_draft * self.candidates)

    def limits(self) -> ShapeLimits:
        return ShapeLimits()

    def set_shape(self, depth: int, total: int) -> DraftShape:
        """A lookup has no node budget: `depth` sets the continuation length, the trie's size follows."""
        self.limits().check(depth, total)
        self.num_draft = depth
        return self.shape
