"""Drafting with a small model that shares the target's tokenizer, run on any Backend.

The draft backend's cache always holds the committed context plus, right after a chain
proposal, the root and the chain tokens it evaluated. `accept` keeps the part of that chain
the target accepted and rolls back the rest, so the draft model never re-reads a token twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from homespec.contracts.drafter import DraftShape, Offer, ShapeLimits
from homespec.contracts.tree import DraftTree, chain
from homespec.speculative.tree import build_dynamic_tree
from homespec.errors import HomespecError
from homespec.speculative.logprobs import log_softmax

if TYPE_CHECKING:
    from homespec.contracts.backend import Backend, Forward


class DraftModelDrafter:
    name = "draft"

    def __init__(self, draft_backend: "Backend", depth: int = 5, *, topk: int = 1, total: int | None = None):
        """depth: draft tokens per path; topk > 1 drafts an EAGLE-2 style tree (needs a backend
        with tree verification); total: tree nodes including the root."""
        if topk > 1 and not draft_backend.supports_tree:
            raise HomespecError(
                f"the {draft_backend.name} draft backend cannot evaluate trees",
                hint="use --draft-topk 1 (a chain) with this backend",
            )
        self.draft = draft_backend
        self.depth, self.topk = depth, topk
        self.total = total if total is not None else (depth + 1 if topk == 1 else min(depth * topk, 48) + 1)
        self._pending: list[int] = []  # committed tokens not yet in the draft cache
        self._speculative: list[int] = []  # tokens in the draft cache beyond the committed context

    def begin(self, prompt: Sequence[int], forward: "Forward", *, kept: int = 0) -> None:
        self.reset()
        self._pending = [int(t) for t in prompt]

    def trim(self, keep: int) -> int:
        """The draft model's own cache is rebuilt from the context at the next proposal."""
        self.reset()
        return keep

    def propose(self, root: int, context: Sequence[int]) -> DraftTree:
        if self.draft.n_past + len(self._pending) != len(context):
            # Out of step (e.g. plain decoding happened without accept()): rebuild from the context.
            self.draft.reset()
            self._pending = [int(t) for t in context]
        if self.topk == 1:
            return self._chain(int(root))
        return self._tree(int(root))

    def offers(self, root: int, context: Sequence[int]) -> tuple[Offer, ...]:
        """A draft model drafts when chosen: what it offers is known only then."""
        return (Offer(self.name),)

    def accept(self, tokens: Sequence[int], features: np.ndarray | None, next_token: int) -> None:
        tokens = [int(t) for t in tokens]
        keep = 0
        while keep < min(len(tokens), len(self._speculative)) and tokens[keep] == self._speculative[keep]:
            keep += 1
        if len(self._speculative) > keep:
            self.draft.rollback(len(self._speculative) - keep)
        self._pending += tokens[keep:]
        self._speculative = []

    def reset(self) -> None:
        self.draft.reset()
        self._pending, self._speculative = [], []

    # --- the shape the guard may set (contracts/drafter.py) ----------------------------------

    @property
    def shape(self) -> DraftShape:
        return DraftShape(self.depth, self.topk, self.total)

    def limits(self) -> ShapeLimits:
        return ShapeLimits()  # the draft backend holds a chain or tree of any depth its context does

    def set_shape(self, depth: int, total: int) -> DraftShape:
        """A chain drafts `depth` tokens (total follows: depth + 1); a tree keeps `total` nodes."""
        self.limits().check(depth, total)
        self.depth = depth
        self.total = depth + 1 if self.topk == 1 else total
        return self.shape

    # --- internals -------------------------------------------------------------------------

    def _chain(self, root: int) -> DraftTree:
        logits = self.draft.prefill(self._pending + [root]).logits[-1]  # [V]
        self._pending, self._speculative = [], [root]
        tokens, probs = [root], []
        for d in range(self.depth):
            x = int(logits.argmax())  # same tie-break as greedy verification
            tokens.append(x)
            probs.append(float(np.exp(log_softmax(logits)[x])))
            if d + 1 < self.depth:
                logits = self.draft.prefill([x]).logits[-1]
                self._speculative.append(x)
        return chain(tokens, probs)

    def _tree(self, root: int) -> DraftTree:
        if self._pending:
            self.draft.prefill(self._pending)
            self._pending = []
        # The nodes expanded so far, as a tree the draft backend verifies in one pass per level.
        exp_tokens: list[int] = []
        exp_parents: list[int] = []
        level_index: list[int] = []  # expanded-tree index of each row of the previous level

        def step(tokens: np.ndarray, parent_rows: np.ndarray, depth: int) -> np.ndarray:
            nonlocal level_index
            rows = []
            for tok, pr in zip(tokens.tolist(), parent_rows.tolist()):
                exp_parents.append(-1 if pr < 0 else level_index[pr])
                exp_tokens.append(int(tok))
                rows.append(len(exp_tokens) - 1)
            level_index = rows
            return log_softmax(self.draft.verify(exp_tokens, exp_parents).logits[rows])  # [F, V]

        return build_dynamic_tree(step, root, depth=self.depth, topk=self.topk, total=self.total)
