"""Prompt reuse: which lane a new request takes, and how much of its cache it keeps.

A lane keeps its last request's KV (the target's, and its drafter's state) after the answer. A
chat UI sends the whole conversation again each turn, and an agent the same system prompt and
files each call, so most of a new prompt is often in some lane's cache already:

* the request goes to the free lane where it costs least: the prompt tokens it must prefill there
  plus the cached tokens it would throw away (choose_lane), so a conversation's next turn returns to
  its own lane and a newcomer sharing only a system prompt takes an empty lane rather than evicting
  a conversation;
* the lane keeps `keep = min(shared, len(prompt)) - 1` tokens and prefills the rest. One token less
  than shared: the prompt's last token must be decoded again for its logits (llama-server does
  the same), and an EAGLE drafter needs the target's feature at position keep - 1 paired with the
  token at keep, which a shared prefix of `keep + 1` tokens guarantees is unchanged;
* the target's cache is cut there (`Lanes.trim`; llama.cpp cannot cut a recurrent state or an SWA
  cache past its window: the lane is then emptied and the whole prompt prefilled), and so is the
  drafter's state (`Drafter.trim`, which may keep less: what it kept is what both keep).

llama-server does this with `cache_prompt` (default on) and `--slot-prompt-similarity`; a request
with `cache_prompt: false` starts from an empty cache, as every answer did before.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

MAX_CHECKPOINTS = 4  # per lane: the prefills of the last few turns (llama-server keeps 8 by default)

if TYPE_CHECKING:
    from homespec.contracts.backend import Lanes
    from homespec.contracts.drafter import Drafter
    from homespec.engine.running import Running


@dataclass
class Lane:
    """One lane's lasting state: what its cache holds between requests."""

    index: int
    drafter: "Drafter | None"
    cached: list[int] = field(default_factory=list)  # committed tokens in the target's KV
    drafter_len: int = 0  # of those, how many the drafter's state covers
    last_used: float = 0.0
    running: "Running | None" = None
    # (position, partial state) saved right after a prompt was prefilled, where the memory cannot be
    # cut anywhere (a recurrent state, a sliding window): where a later prompt can resume from
    checkpoints: list[tuple[int, bytes]] = field(default_factory=list)

    def add_checkpoint(self, pos: int, data: bytes) -> None:
        self.checkpoints = [c for c in self.checkpoints if c[0] < pos][-(MAX_CHECKPOINTS - 1):] + [(pos, data)]

    def leave(self, r: "Running", *, failed: bool) -> None:
        """Record what a finished (or cancelled, or failed) request left in the lane."""
        self.running = None
        self.last_used = time.monotonic()
        if failed:  # the cache may hold a half-verified tree: nothing in it is trusted
            self.cached, self.drafter_len, self.checkpoints = [], 0, []
            return
        self.cached = r.cached
        # a request decoded without the drafter left its state behind the cache
        self.drafter_len = min(r.drafter_len, len(self.cached)) if r.drafter is not None else 0


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def choose_lane(free: list[Lane], prompt: Sequence[int]) -> Lane:
    """The free lane where the request costs least: the prompt tokens it must prefill there plus the
    cached tokens it would throw away (another conversation's history, which that conversation
    would have to prefill again). A chat's next turn thus returns to its own lane, and a new
    request sharing only a system prompt with a busy conversation's lane takes an empty lane
    instead of evicting it. Ties: the lane that keeps more, then the least recently used."""
    def cost(lane: Lane) -> tuple[int, int, float]:
        keep = keep_for(lane.cached, prompt)
        return (len(prompt) - keep) + (len(lane.cached) - keep), -keep, lane.last_used

    return min(free, key=cost)


def keep_for(cached: Sequence[int], prompt: Sequence[int]) -> int:
    """Tokens of `cached` a request for `prompt` keeps: the shared prefix, less the token decoded again."""
    return max(0, min(common_prefix(cached, prompt), len(prompt)) - 1)


def reuse(lanes: "Lanes", lane: Lane, prompt: Sequence[int], *, drafter: "Drafter | None", enabled: bool) -> int:
    """Cut the lane's cache to what `prompt` can reuse -> tokens kept (0: prefill all of it)."""
    keep = keep_for(lane.cached, prompt) if enabled else 0
    if drafter is not None:
        keep = min(keep, lane.drafter_len)
        keep = drafter.trim(keep) if keep else _reset(drafter)
    elif lane.drafter is not None:  # this request decodes plainly: the drafter falls behind
        lane.drafter.reset()
    if keep < len(lane.cached) or keep == 0:
        got = _cut(lanes, lane, keep)
        if got < keep and drafter is not None:  # resumed from an earlier checkpoint: the drafter too
            got = drafter.trim(got) if got else _reset(drafter)
        keep = got
    lane.cached = lane.cached[:keep]
    lane.checkpoints = [c for c in lane.checkpoints if c[0] <= keep]
    return keep


def _cut(lanes: "Lanes", lane: Lane, keep: int) -> int:
    """Cut the lane's target memory to `keep` tokens -> tokens it holds now: `keep`; else the
    position of the latest checkpoint at or before it, resumed; else 0 (the lane emptied)."""
    if keep > 0 and lanes.trim(lane.index, keep):
        return keep
    for pos, data in reversed(lane.checkpoints):
        if 0 < pos <= keep and getattr(lanes, "resume", None) is not None and lanes.resume(lane.index, pos, data):
            return pos
    lanes.free(lane.index)  # whatever the lane held (a failed request's cells too) goes
    return 0


def _reset(drafter: "Drafter") -> int:
    drafter.reset()
    return 0
