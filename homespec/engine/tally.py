"""An engine's counters, added up from what its requests did: every scheduler shares these rules,
so `/metrics` means the same whichever engine serves.

A draft is one sequence-step that verified a tree of at least one drafted node (vLLM's
`spec_decode_num_drafts`); its draft tokens are the tree's nodes beyond the root; the accepted
tokens are the drafted ones the target kept, counted per depth of the accepted path
(`num_accepted_tokens_per_pos`: position 0 is the first drafted token after the root). The same
three counts are kept per drafter (`spec_by_drafter`): with `--method auto` they say who drafted
what was accepted.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import TYPE_CHECKING, Iterable

from homespec.engine.api import EngineStats

if TYPE_CHECKING:
    from homespec.engine.responses import Finish
    from homespec.speculative.steps import Step


def add_steps(stats: EngineStats, steps: Iterable["Step"]) -> None:
    """The speculation counters of these steps, added to `stats`."""
    for s in steps:
        if not (s.speculative and s.draft_size > 0):
            continue
        stats.spec_num_drafts += 1
        stats.spec_num_draft_tokens += s.draft_size
        stats.spec_num_accepted_tokens += s.accepted
        mine = stats.spec_by_drafter.setdefault(s.drafter or "?", [0, 0, 0])
        mine[0], mine[1], mine[2] = mine[0] + 1, mine[1] + s.draft_size, mine[2] + s.accepted
        if len(stats.spec_accepted_per_pos) < s.accepted:
            stats.spec_accepted_per_pos.extend([0] * (s.accepted - len(stats.spec_accepted_per_pos)))
        for pos in range(s.accepted):
            stats.spec_accepted_per_pos[pos] += 1


def add_finish(stats: EngineStats, finish: "Finish") -> None:
    """One request's totals (finished or cancelled), added to `stats`."""
    if finish.finish == "cancelled":
        stats.requests_cancelled += 1
    else:
        stats.requests_finished += 1
    stats.prompt_tokens_total += len(finish.prompt_token_ids)
    stats.generation_tokens_total += len(finish.token_ids)
    stats.target_passes_total += finish.target_passes
    add_steps(stats, finish.steps)


class SpeedWindow:
    """Generated tokens per second over the last `span_s` seconds (a gauge, 0 when idle)."""

    def __init__(self, span_s: float = 10.0) -> None:
        self.span_s = span_s
        self._events: "collections.deque[tuple[float, int]]" = collections.deque()
        self._lock = threading.Lock()

    def add(self, n_tokens: int, now: float | None = None) -> None:
        with self._lock:
            self._events.append((time.monotonic() if now is None else now, n_tokens))

    def rate(self, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        with self._lock:
            while self._events and self._events[0][0] < now - self.span_s:
                self._events.popleft()
            return sum(n for _, n in self._events) / self.span_s
