"""The seam between a drafter's policy and a draft network that runs inside the target's engine.

An EAGLE-3 head (or a model's own MTP layers) runs where the target runs: in llama.cpp, beside the
target's context (homespec/backends/llamacpp/head.py). The drafter (homespec/speculative/drafters/)
decides what to draft — which committed entries to write, how deep, how wide, which nodes to expand
— and the network only computes. One network serves every lane of an engine; a lane's calls name it.

Positions follow EAGLE-3's convention: entry j pairs the target's feature at position j with the
token at position j+1 and sits at position j. The entry of the newest committed token is the
*seed*: it waits for the next root token, and its output drafts the root's children.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, Sequence

if TYPE_CHECKING:
    import numpy as np

    from homespec.contracts.tree import DraftTree


@dataclass(frozen=True, slots=True)
class Candidates:
    """One call's output rows: each row's best `k` children, and what each row feeds the next level."""

    ids: "np.ndarray"  # [F, k] int64 target ids, best first
    logp: "np.ndarray"  # [F, k] float64 log-probabilities, normalised over the draft vocabulary
    hidden: "np.ndarray"  # [F, H] float32 the row a child of this node consumes


@dataclass(frozen=True, slots=True)
class Grown:
    """Every candidate of a tree grown on the network's side (DraftNet.grow), level by level, node by
    node, child by child, as speculative/tree.py grow_tree makes them: which to keep is the drafter's
    (tree.keep_best). Views of the network's buffers: read before its next call."""

    tokens: "np.ndarray"  # [n] int64 target ids
    logp: "np.ndarray"  # [n] float64 each candidate's log-probability given its parent
    score: "np.ndarray"  # [n] float64 the sum of the log-probabilities along its path
    parent: "np.ndarray"  # [n] int64 its parent's candidate index (-1: the root)


class DraftNet(Protocol):
    n_embd: int  # H: the width of the rows fed back
    window: int | None  # attend to the newest `window` entries (plus `sinks`), None: to all
    sinks: int

    def new_lane(self) -> int:
        """A lane of this network for one more drafter (lanes share the weights)."""
        ...

    def encode(self, features: "np.ndarray") -> "np.ndarray":
        """[n, k*H_t] target features -> [n, H] the rows committed entries consume."""
        ...

    def write(self, lane: int, tokens: Sequence[int], rows: "np.ndarray", pos0: int) -> None:
        """Committed entries (tokens[i], rows[i]) at positions pos0 + i; no outputs."""
        ...

    def seed(self, lane: int, tokens: Sequence[int], rows: "np.ndarray", pos0: int, k: int) -> Candidates:
        """Committed entries (tokens[i], rows[i]) at positions pos0 + i, the last the newest (its token
        the root), whose output drafts the root's children (the others have none)."""
        ...

    def level(self, lane: int, depth: int, tokens: Sequence[int], hidden: "np.ndarray", parents: Sequence[int],
              pos: int, k: int) -> Candidates:
        """Tree nodes at `depth` >= 1, each fed its parent's row; parents index the previous call's rows."""
        ...

    def grow(self, lane: int, seed: Candidates, pos: int, *, depth: int, topk: int) -> Grown | None:
        """Every candidate of the tree (grow_tree's rule, homespec/speculative/tree.py) from the seed's
        children, level 1 at `pos`, in one call on the network's side, its levels dropped after; None
        where the network cannot, and the drafter then calls level() per level and end_tree()."""
        ...

    def draft(self, lane: int, tokens: Sequence[int], features: "np.ndarray", pos0: int, *, depth: int, topk: int,
              total: int) -> "tuple[DraftTree, Candidates] | None":
        """A step's draft in one call on the network's side: the committed entries (tokens[i], the target's
        features[i], encoded there) at positions pos0 + i, the last the seed, then the tree grown from the
        seed's children with its best `total - 1` candidates kept — what encode(), seed(), grow() and
        tree.keep_best make. -> (the tree, the seed's output); None where the network cannot, and the
        drafter then encodes, seeds and grows."""
        ...

    def end_tree(self, lane: int) -> None:
        """Drop the tree's nodes; the committed entries stay."""
        ...

    def forget(self, lane: int, p0: int, p1: int) -> None:
        """Drop committed entries at positions [p0, p1) (left behind by a window)."""
        ...

    def trim(self, lane: int, keep: int) -> None: ...

    def reset(self, lane: int) -> None: ...

    def save(self, lane: int) -> bytes: ...

    def load(self, lane: int, data: bytes) -> bool: ...
