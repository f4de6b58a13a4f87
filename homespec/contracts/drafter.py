"""The Drafter protocol: what the generate loop calls on a drafter, and the one knob the guard
turns (the draft's shape), declared by the drafter instead of read off its attributes.

Before the guard decides a step, each drafter says what it can offer (`offers`): a lookup finds
its chain at once (an `Offer` with its tokens and the match length that found it, at no cost to
the target); a model drafter offers to draft when chosen (an `Offer` without tokens). The guard
picks one offer per lane, or none (homespec.speculative.choice).

A drafter's shape is a `DraftShape(depth, topk, total)`. The guard (homespec.speculative.guard)
reads `drafter.shape`, asks `drafter.limits()` how far it may go, and calls
`drafter.set_shape(depth, total)`; it never sets `topk` (a chain stays a chain, a tree a tree).
Each drafter maps the shape onto its own parameters (docs/speculative.md, "Drafters").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, Sequence

from homespec.errors import ContractError

if TYPE_CHECKING:
    import numpy as np

    from homespec.contracts.backend import Forward
    from homespec.contracts.tree import DraftTree

# The deepest draft the guard tries by default (Guard.max_depth); drafters whose state is sized by
# the depth (the EAGLE-3 head's KV cache) size it for at least this.
MAX_DEPTH = 8


@dataclass(frozen=True, slots=True)
class DraftShape:
    """How much a drafter drafts per step."""

    depth: int  # the longest path of draft tokens (tree levels below the root)
    topk: int  # children per expanded node; 1 drafts a chain
    total: int  # the most tree nodes, the root included

    def __post_init__(self) -> None:
        if self.depth < 1 or self.topk < 1 or self.total < 2:
            raise ContractError(f"a draft shape needs depth >= 1, topk >= 1 and total >= 2, got {self}",
                                hint="e.g. depth 4, topk 1, total 5 (a chain)")


@dataclass(frozen=True, slots=True)
class ShapeLimits:
    """How far the guard may move a drafter's depth and total (None: no bound of the drafter's own)."""

    max_depth: int | None = None
    max_total: int | None = None

    def clamp(self, depth: int, total: int) -> tuple[int, int]:
        """(depth, total) moved inside the limits; at least a one-token chain."""
        if self.max_depth is not None:
            depth = min(depth, self.max_depth)
        if self.max_total is not None:
            total = min(total, self.max_total)
        return max(1, depth), max(2, total)

    def check(self, depth: int, total: int) -> None:
        """Refuse a shape outside the limits (the guard clamps first, so this is a caller's bug)."""
        if (depth, total) != self.clamp(depth, total):
            raise ContractError(f"draft depth {depth} / total {total} is outside this drafter's limits {self}",
                                hint="clamp the shape with drafter.limits().clamp(depth, total)")


@dataclass(frozen=True, slots=True)
class Offer:
    """What one drafter can draft this step, before the guard chooses."""

    source: str  # the drafter's name: "ngram", "suffix", "eagle3", "draft", "mtp"
    tokens: tuple[int, ...] | None = None  # a deterministic chain found now; None: drafted when chosen
    key: int = 0  # what the drafter knew up front (a lookup: the length of the match that found it)

    @property
    def known(self) -> bool:
        """A chain known before the guard chooses (a lookup), not one a model drafts when chosen."""
        return self.tokens is not None


class Drafter(Protocol):
    name: str

    def begin(self, prompt: Sequence[int], forward: "Forward", *, kept: int = 0) -> None:
        """Called after the target's prefill of `prompt`. `kept`: the first `kept` prompt tokens
        were already in the target's cache (and, after `trim(kept)`, in the drafter's state), so
        `forward.features` covers prompt[kept:] only."""
        ...

    def trim(self, keep: int) -> int:
        """Keep the state of the first `keep` committed tokens of the last context (a new prompt
        shares them) and drop the rest -> how many it could keep (<= keep; 0 after reset)."""
        ...

    def propose(self, root: int, context: Sequence[int]) -> "DraftTree":
        """Draft continuations of `context + [root]`; `context` is every committed token."""
        ...

    def offers(self, root: int, context: Sequence[int]) -> tuple[Offer, ...]:
        """What it can draft after `context + [root]` this step: a lookup's chain (none when
        nothing matches), a model drafter's promise to draft when chosen."""
        ...

    def accept(self, tokens: Sequence[int], features: "np.ndarray | None", next_token: int) -> None:
        """The target committed `tokens` (root first; `features[i]` is the target feature at
        tokens[i], [len(tokens), k*H] float32) and emitted `next_token` as the new root. Drafters
        resync from these."""
        ...

    def reset(self) -> None: ...

    # --- what the guard may read and set ---------------------------------------------------

    @property
    def shape(self) -> DraftShape:
        """The shape the next proposal drafts at most."""
        ...

    def limits(self) -> ShapeLimits:
        """How far `set_shape` may go."""
        ...

    def set_shape(self, depth: int, total: int) -> DraftShape:
        """Draft at most `depth` levels and `total` nodes from the next proposal on (inside
        `limits()`); -> the shape now in effect."""
        ...
