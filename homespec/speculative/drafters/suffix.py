"""Suffix drafting: continuations found in this sequence and in the recent answers of every lane
of the same engine, so an agent's re-emitted files and repeated tool outputs are drafted from the
last time they were written (vLLM's `method: suffix`, after Arctic Inference's suffix decoding).

Two places are searched for the newest tokens (homespec.speculative.matching):

* this sequence's own context (prompt and answer so far), every earlier occurrence;
* the `SuffixStore` the engine's lanes share: the answers they wrote, each indexed by its 3-grams.

The longest match wins; where several earlier occurrences match that long, the chain follows
what most of them continued with, token by token (the frequency rule of a suffix tree), the
latest breaking ties. The offer's key is the match length, as for prompt lookup.

The store is bounded: it holds at most `max_tokens` tokens (default 65,536, about 8 MiB with its
index); when an answer being written would pass that, the oldest answers are dropped whole, first
in first out, and their index entries with them. An index key keeps its latest `per_key`
occurrences. What one user's answer puts in the store reaches another's only as a draft the
target verifies: greedy output never depends on drafts, and sampled verification keeps the
target's distribution (docs/architecture.md, contracts 1 and 2).
"""

from __future__ import annotations

import collections
import threading
from typing import TYPE_CHECKING, Sequence

import numpy as np

from homespec.contracts.drafter import DraftShape, Offer, ShapeLimits
from homespec.contracts.tree import DraftTree
from homespec.speculative.drafters.lookup import Lookup
from homespec.speculative.drafters.ngram import merge_paths
from homespec.speculative.matching import MAX_MATCH, Match

if TYPE_CHECKING:
    from homespec.contracts.backend import Forward

KEY = 3  # tokens an index key spans
LEAD_IN = 8  # prompt tokens stored before an answer: its start is found from what preceded it
STORE_TOKENS = 1 << 16


class SuffixStore:
    """The recent answers of an engine's lanes, indexed by 3-gram; thread-safe, bounded."""

    def __init__(self, max_tokens: int = STORE_TOKENS, per_key: int = 32) -> None:
        if max_tokens < 1 or per_key < 1:
            raise ValueError("a suffix store needs max_tokens >= 1 and per_key >= 1")
        self.max_tokens, self.per_key = max_tokens, per_key
        self._docs: collections.OrderedDict[int, list[int]] = collections.OrderedDict()  # oldest first
        # 3-gram (packed in one int) -> where it occurred, oldest first: (answer << 32) | index of
        # the token after it
        self._index: dict[int, list[int]] = {}
        self._tokens = 0
        self._next = 0
        self._lock = threading.Lock()

    @property
    def tokens(self) -> int:
        return self._tokens

    def open(self, lead_in: Sequence[int]) -> int:
        """A new answer, preceded by `lead_in` (the prompt's last tokens) -> its id."""
        with self._lock:
            doc = self._next
            self._next += 1
            self._docs[doc] = []
        self.extend(doc, lead_in)
        return doc

    def extend(self, doc: int, tokens: Sequence[int]) -> None:
        """Append `tokens` to answer `doc` (nothing once it has been dropped), index them, and
        drop the oldest answers while the store holds more than max_tokens."""
        with self._lock:
            seq = self._docs.get(doc)
            if seq is None:
                return
            start = len(seq)
            seq.extend(int(t) for t in tokens)
            self._tokens += len(seq) - start
            for i in range(max(KEY, start), len(seq)):  # the 3-gram ending at i - 1 is followed by seq[i]
                where = self._index.setdefault(_key(seq, i), [])
                where.append((doc << 32) | i)
                if len(where) > self.per_key:
                    del where[0]
            while self._tokens > self.max_tokens and self._docs:
                self._drop_oldest()

    def _drop_oldest(self) -> None:
        doc, seq = self._docs.popitem(last=False)
        self._tokens -= len(seq)
        for i in range(KEY, len(seq)):
            key = _key(seq, i)
            where = self._index.get(key)
            if where is None:
                continue
            where[:] = [w for w in where if w >> 32 != doc]
            if not where:
                del self._index[key]

    def find(self, seq: np.ndarray, *, skip: int = -1, cap: int = MAX_MATCH,
             floor: int = 1) -> list[tuple[int, list[int]]]:
        """Stored occurrences of the newest 3 tokens of `seq`, latest first, as (match length
        measured backwards up to `cap`, the stored tokens after it), each at least `floor` long;
        answer `skip` left out."""
        if len(seq) < KEY:
            return []
        tail = seq[-cap:].tolist()
        out = []
        with self._lock:
            for w in reversed(self._index.get(_key(tail, len(tail)), ())):
                doc, end = w >> 32, w & 0xFFFFFFFF
                stored = self._docs.get(doc)
                if doc == skip or stored is None or end >= len(stored):
                    continue
                n = KEY
                while n < len(tail) and end - 1 - n >= 0 and stored[end - 1 - n] == tail[-1 - n]:
                    n += 1
                if n >= floor:
                    out.append((n, stored[end:end + MAX_MATCH]))
        return out


def _key(seq: Sequence[int], i: int) -> int:
    """The 3-gram seq[i-3:i] in one int (token ids below 2^21: every vocabulary in use)."""
    return (seq[i - 3] << 42) | (seq[i - 2] << 21) | seq[i - 1]


class SuffixDrafter(Lookup):
    name = "suffix"

    def __init__(self, store: SuffixStore | None = None, num_draft: int = 8) -> None:
        if num_draft < 1:
            raise ValueError("num_draft must be >= 1")
        self.store = store if store is not None else SuffixStore()
        self.num_draft = num_draft
        self._doc = -1  # this lane's answer in the store

    def begin(self, prompt: Sequence[int], forward: "Forward", *, kept: int = 0) -> None:
        self._doc = self.store.open(prompt[-LEAD_IN:])

    def trim(self, keep: int) -> int:
        return keep  # the context is searched afresh each step; the store keeps no lane's position

    def offer_in(self, seq: np.ndarray, own: list[Match], floor: int = 1) -> tuple[Offer, ...]:
        """The chain most earlier occurrences of the longest match continue with: this sequence's
        matches already found (`own`, over `seq`: context + root) and the store's."""
        best = own[0].length if own else 0
        found = [(m.length, seq[m.end:m.end + self.num_draft].tolist()) for m in own if m.length == best]
        found += self.store.find(seq, skip=self._doc, floor=floor)
        if not found:
            return ()
        best = max(n for n, _ in found)
        chain = majority([c[:self.num_draft] for n, c in found if n == best])
        return (Offer(self.name, tuple(chain), best),) if chain else ()

    def propose(self, root: int, context: Sequence[int]) -> DraftTree:
        found = self.offers(root, context)
        return merge_paths(int(root), [list(found[0].tokens)] if found else [])

    def accept(self, tokens: Sequence[int], features: "np.ndarray | None", next_token: int) -> None:
        if self._doc >= 0:
            self.store.extend(self._doc, tokens)

    def reset(self) -> None:
        self._doc = -1

    # --- the shape the guard may set (contracts/drafter.py) ----------------------------------

    @property
    def shape(self) -> DraftShape:
        return DraftShape(self.num_draft, 1, 1 + self.num_draft)

    def limits(self) -> ShapeLimits:
        return ShapeLimits()

    def set_shape(self, depth: int, total: int) -> DraftShape:
        self.limits().check(depth, total)
        self.num_draft = depth
        return self.shape


def majority(continuations: list[list[int]]) -> list[int]:
    """Token by token, the next token most of the still-agreeing continuations have (the first
    listed among equals: the latest occurrence), until none has one."""
    alive = [c for c in continuations if c]
    out: list[int] = []
    while alive:
        t = len(out)
        counts = collections.Counter(c[t] for c in alive)
        top = max(counts.values())
        pick = next(c[t] for c in alive if counts[c[t]] == top)
        out.append(pick)
        alive = [c for c in alive if c[t] == pick and len(c) > t + 1]
    return out
