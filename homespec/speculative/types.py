"""Data passed between drafters, verification and the generate loop."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, Sequence

if TYPE_CHECKING:
    import torch

    from homespec.backends.base import Forward


@dataclass(frozen=True, slots=True)
class DraftTree:
    """A draft tree; node 0 is the root (the last emitted token, not yet in the target's cache).

    A chain is a tree in which every node has one child. Parents come before children.
    """

    tokens: "torch.Tensor"  # [T] int64 target-vocabulary ids; tokens[0] = root
    parents: "torch.Tensor"  # [T] int64; parents[0] = -1, parents[i] < i
    # [T] float32: the draft's probability of each node given its parent (1.0 for the root).
    # Used by rejection sampling and the confidence-adaptive tree size.
    probs: "torch.Tensor"

    @property
    def size(self) -> int:
        return int(self.tokens.shape[0])


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of verifying one tree."""

    path: tuple[int, ...]  # accepted node indices, root first (always contains 0)
    next_token: int  # the target's own token after the accepted path (bonus / correction)

    @property
    def accepted(self) -> int:
        """Draft tokens accepted (the root is not a draft token)."""
        return len(self.path) - 1


class Drafter(Protocol):
    name: str

    def begin(self, prompt: Sequence[int], forward: "Forward") -> None:
        """Called after the target's prefill of `prompt` (features for every prompt position)."""
        ...

    def propose(self, root: int, context: Sequence[int]) -> DraftTree:
        """Draft continuations of `context + [root]`; `context` is every committed token."""
        ...

    def accept(self, tokens: Sequence[int], features: "torch.Tensor | None", next_token: int) -> None:
        """The target committed `tokens` (root first; `features[i]` is the target feature at
        tokens[i]) and emitted `next_token` as the new root. Drafters resync from these."""
        ...

    def reset(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Step:
    """One iteration of the generate loop, as chat / generate / bench see it."""

    tokens: tuple[int, ...]  # emitted this step (may be empty on the final step)
    accepted: int  # draft tokens accepted this step
    draft_size: int  # draft nodes proposed (excluding the root)
    n_past: int  # committed context length after this step
    t_draft: float  # seconds spent drafting
    t_verify: float  # seconds in the target pass(es)
    t_step: float  # seconds for the whole step
    speculative: bool = True  # False when this step ran plain decoding (guard fallback or --method none)
    finish: str | None = None  # "eos" | "stop" | "length" | "context" on the last step
