"""What one speculative step is and the rules every step follows, whoever runs it.

A step drafts a tree from the pending root token (a one-node tree for plain decoding), verifies
it in one target pass, keeps the accepted path in the target's KV cache, and emits the accepted
draft tokens plus the target's own next token. The engine (homespec.engine.step) runs steps for
every lane at once; these are the pieces of the rule it applies to each: how the first token is
picked from logits, where an answer ends, and how a tree is cut to the room left in a context.
Token ids only: text, and the stop strings found in it, belong to the engine's detokenizer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Collection

import numpy as np

from homespec.contracts.tree import DraftTree

if TYPE_CHECKING:
    from homespec.speculative.sampling import Sampler


@dataclass(frozen=True, slots=True)
class Step:
    """One verification step of one sequence, as chat / generate / bench / serve see it."""

    tokens: tuple[int, ...]  # emitted this step (may be empty on the final step)
    accepted: int  # draft tokens accepted this step
    draft_size: int  # draft nodes proposed (excluding the root)
    n_past: int  # committed context length after this step
    t_draft: float  # seconds spent drafting
    t_verify: float  # seconds in the target pass(es)
    t_step: float  # seconds for the whole step
    speculative: bool = True  # False when this step ran plain decoding (guard fallback or --method none)
    finish: str | None = None  # "eos" | "stop" | "length" | "context" on the last step
    drafter: str | None = None  # who drafted this step's tree ("ngram", "suffix", "eagle3", ...); None: plain


@dataclass(frozen=True, slots=True)
class Limits:
    max_tokens: int = 256
    stop_at_eos: bool = True  # False: the tokenizer is never read (a backend may have none)


# shared by every plain step's tree, so read-only
_ROOT_PARENTS = np.array([-1], dtype=np.int64)
_ROOT_PROBS = np.ones(1, dtype=np.float32)
_ROOT_PARENTS.flags.writeable = _ROOT_PROBS.flags.writeable = False


def root_only(root: int) -> DraftTree:
    """The one-node tree of a plain step."""
    return DraftTree(np.array([root], dtype=np.int64), _ROOT_PARENTS, _ROOT_PROBS)


def pick(logits: np.ndarray, sampler: "Sampler | None", generator: np.random.Generator | None) -> int:
    """The token after `logits` [V]: its argmax (greedy), else a draw from the sampler."""
    if sampler is None or sampler.greedy:
        return int(logits.argmax())
    return int(sampler.sample(logits, generator))


def finish_reason(new: list[int], n_out: int, eos: Collection[int], limits: Limits, n_past: int,
                  max_context: int) -> str | None:
    """Why the answer ends after a step that emitted `new` (None: it goes on)."""
    if new and new[-1] in eos:
        return "eos"
    if n_out >= limits.max_tokens:
        return "length"
    if n_past + 1 >= max_context:
        return "context"
    return None


def cut_at_eos(tokens: list[int], eos: Collection[int]) -> list[int]:
    """The tokens up to and including the first end-of-generation token."""
    for i, t in enumerate(tokens):
        if t in eos:
            return tokens[: i + 1]
    return tokens


def truncate(tree: DraftTree, size: int) -> DraftTree:
    """The first `size` nodes: parents precede children, so they are a valid subtree."""
    return DraftTree(tree.tokens[:size], tree.parents[:size], tree.probs[:size])
