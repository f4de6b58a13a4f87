"""One answer's grammar state, and the two places a speculative step needs it.

The matcher has consumed every token the answer emitted (the pending root included). A step then

* `prune(tree)`: walks the draft tree parents-first, keeping a node only when its token is allowed
  after its parent's path (so a dropped node takes its subtree with it), and records the mask
  after each kept node's path: `masks[i]` is the set of tokens the grammar allows after
  root..i, which is exactly what the target's logits row i is a distribution over. The matcher
  goes down each path and is rolled back to the committed state at the end.
* `constrain(logits, masks)`: every row's forbidden tokens at -inf, before verification. Greedy
  verification then takes the masked argmax at every node and rejection sampling accepts against
  the masked, renormalised distribution (docs/architecture.md, contract 2, with the constrained
  distribution as the target's), so a draft never leaves the grammar and neither does the
  target's own next token.
* `advance(tokens)`: the emitted tokens (the accepted path and the target's next token) move the
  matcher; nothing rejected was ever consumed.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np

from homespec.contracts.tree import DraftTree


class Guide:
    def __init__(self, matcher: Any, n_vocab: int, eos: Sequence[int]) -> None:
        self.matcher = matcher
        self.n_vocab = n_vocab
        self.eos = tuple(eos)
        self._words = np.zeros((n_vocab + 31) // 32, dtype=np.uint32)  # llguidance's bitmask
        self.mask_s = 0.0  # seconds spent computing masks (the figure the grammar benchmark reports)
        self.masks_computed = 0

    # --- masks --------------------------------------------------------------------------------

    def mask(self) -> np.ndarray:
        """[n_vocab] bool: the tokens the grammar allows next. When it allows none (a matcher in
        error), the end-of-generation ids, so the answer ends rather than leaves the grammar."""

        t0 = time.perf_counter()
        self.matcher.unsafe_compute_mask_ptr(self._words.ctypes.data, self._words.nbytes)
        # bit j of mask word i is token 32 * i + j: the words' little-endian bytes, bits low first
        bits = np.unpackbits(self._words.astype("<u4").view(np.uint8), bitorder="little")
        allowed = bits[:self.n_vocab].view(bool)  # [V]
        if not allowed.any():
            allowed[list(self.eos)] = True
        self.mask_s += time.perf_counter() - t0
        self.masks_computed += 1
        return allowed

    def constrain(self, logits: np.ndarray, masks: np.ndarray) -> np.ndarray:
        """logits [T, V] with the tokens masks [T, V'] forbids at -inf, as a new array (a model
        vocabulary wider than the tokenizer's: the extra ids are never allowed)."""
        width = min(logits.shape[-1], masks.shape[-1])
        out = np.full(logits.shape, -np.inf, dtype=logits.dtype)
        np.copyto(out[..., :width], logits[..., :width], where=masks[..., :width])
        return out

    # --- a step -------------------------------------------------------------------------------

    def prune(self, tree: DraftTree) -> tuple[DraftTree, np.ndarray]:
        """The tree without the nodes the grammar forbids, and the mask after each kept node's
        path -> (tree [T'], masks [T', V])."""
        tokens, parents = tree.tokens.tolist(), tree.parents.tolist()
        row = {0: 0}  # tree node -> row in the kept tree
        keep, masks = [0], [self.mask()]
        down: list[int] = []  # the tree nodes the matcher has consumed beyond the committed state
        # Nodes whose path ends the grammar (its end-of-generation token): nothing follows them. A
        # stopped matcher takes no more tokens, and rolls back none it did not take, so consuming
        # a child of one would leave `down` counting a token the matcher never held, and the
        # rollback below would eat into the committed tokens.
        ended = {0} if self.matcher.is_stopped() else set()
        for i in range(1, len(tokens)):
            p = parents[i]
            if p not in row or p in ended or not bool(masks[row[p]][tokens[i]]):
                continue  # its parent was dropped or ended the grammar, or the grammar forbids it there
            path = _path(parents, i)
            common = _common(down, path)
            if len(down) > common:
                self.matcher.rollback(len(down) - common)
            for node in path[common:]:
                self.matcher.consume_token(tokens[node])
            down = path
            row[i] = len(keep)
            keep.append(i)
            masks.append(self.mask())
            if self.matcher.is_stopped():
                ended.add(i)
        if down:
            self.matcher.rollback(len(down))
        return _subtree(tree, keep, row), np.stack(masks)

    def advance(self, tokens: Sequence[int]) -> None:
        """The emitted tokens, in order (each allowed: they were drawn under the masks)."""
        for t in tokens:
            if self.matcher.is_stopped():
                return
            self.matcher.consume_token(int(t))

    @property
    def done(self) -> bool:
        """The grammar is complete: only an end-of-generation token may follow."""
        return bool(self.matcher.is_stopped())


def _path(parents: list[int], node: int) -> list[int]:
    """The nodes from the root's child down to `node`."""
    out = []
    while node > 0:
        out.append(node)
        node = parents[node]
    return out[::-1]


def _common(a: list[int], b: list[int]) -> int:
    n = 0
    while n < len(a) and n < len(b) and a[n] == b[n]:
        n += 1
    return n


def _subtree(tree: DraftTree, keep: list[int], row: dict[int, int]) -> DraftTree:
    if len(keep) == tree.size:
        return tree
    parents = [-1] + [row[int(tree.parents[i])] for i in keep[1:]]
    return DraftTree(tree.tokens[keep], np.asarray(parents, dtype=np.int64), tree.probs[keep])
