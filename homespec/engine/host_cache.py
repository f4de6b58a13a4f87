"""Idle conversations in host RAM (`--cache-ram MIB`, llama-server's flag): a lane's state is kept
when another request is about to overwrite it, and put back when its conversation returns.

A lane holds one conversation's KV. When a request takes a lane and would throw away at least
MIN_SAVE of its cached tokens, the engine first saves the lane's whole llama.cpp state
(`llama_state_seq_get_data`), its drafter's state and its checkpoints here. When a later prompt
shares more with a saved entry than with any free lane (by at least MIN_GAIN tokens), the entry is
loaded into the free lane that has least to lose (`llama_state_seq_set_data`) and reused from there.
Entries are evicted least recently used first when the budget is full; an entry larger than the
whole budget is not kept. docs/server.md, "Prompt reuse", has the measured restore cost.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

from homespec.engine.reuse import common_prefix

MIN_SAVE = 64  # cached tokens worth keeping: fewer prefill in about what a save and load cost
MIN_GAIN = 32  # tokens a saved entry must reuse beyond the best free lane to be loaded


@dataclass
class Saved:
    tokens: list[int]
    state: bytes  # the target's state for `tokens`
    drafter: object | None  # the drafter's snapshot (None: stateless, or none)
    drafter_len: int
    checkpoints: list[tuple[int, bytes]]
    used: float = field(default_factory=time.monotonic)

    @property
    def nbytes(self) -> int:
        head = sum(int(t.nbytes) for t in self.drafter) if isinstance(self.drafter, tuple) else 0
        return len(self.state) + head + sum(len(d) for _, d in self.checkpoints) + 8 * len(self.tokens)


class HostCache:
    """Saved lane states, least recently used evicted first, within `budget` bytes."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.entries: list[Saved] = []
        self.saves = self.loads = self.evictions = 0

    @property
    def nbytes(self) -> int:
        return sum(e.nbytes for e in self.entries)

    def put(self, saved: Saved) -> bool:
        """Keep `saved` (evicting the least recently used); False when it alone exceeds the budget."""
        size = saved.nbytes
        if size > self.budget:
            return False
        # an entry whose tokens the new one extends (an older state of the same conversation) goes
        self.entries = [e for e in self.entries if common_prefix(e.tokens, saved.tokens) < len(e.tokens)]
        while self.entries and self.nbytes + size > self.budget:
            self.entries.remove(min(self.entries, key=lambda e: e.used))
            self.evictions += 1
        self.entries.append(saved)
        self.saves += 1
        return True

    def best(self, prompt: Sequence[int]) -> tuple[Saved, int] | None:
        """The entry sharing the longest prefix with `prompt`, and how long it is."""
        scored = [(common_prefix(e.tokens, prompt), e) for e in self.entries]
        scored = [(n, e) for n, e in scored if n > 0]
        if not scored:
            return None
        n, e = max(scored, key=lambda x: (x[0], x[1].used))
        return e, n

    def take(self, saved: Saved) -> None:
        """`saved` is back in a lane: it leaves the cache (it is saved again when evicted from there)."""
        self.entries.remove(saved)
        self.loads += 1
