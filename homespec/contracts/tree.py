"""Draft trees: the tree contract every drafter, verifier and backend shares (docs/speculative.md,
"Tree"). EAGLE-2's dynamic tree builder, the drafting algorithm over it, is
homespec.speculative.tree's.

Conventions: node 0 is the root (the last emitted token); `parents[0] == -1` and
`parents[i] < i`, so any loop over nodes in index order sees a parent before its children.
This module is the one place that checks them (`check_parents`, `check_tree`, `check_path`) and
derives what a verifier needs from them (`depth_list` / `depths`, `ancestor_mask`, `leaves`,
`paths`, `path_to`): the backends call these rather than keep their own copies. Breaking the
contract raises `TreeError`.

The contract half is pure Python; what a verifier or drafter builds from it is numpy arrays on
the host (no torch on the GGUF run path: docs/architecture.md, "Where each part runs").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from homespec.errors import TreeError

TREE_HINT = "parents[0] must be -1 (the root) and 0 <= parents[i] < i"


@dataclass(frozen=True, slots=True)
class DraftTree:
    """A draft tree; node 0 is the root (the last emitted token, not yet in the target's cache).

    A chain is a tree in which every node has one child. Parents come before children.
    """

    tokens: np.ndarray  # [T] int64 target-vocabulary ids; tokens[0] = root
    parents: np.ndarray  # [T] int64; parents[0] = -1, parents[i] < i
    # [T] float32: the draft's probability of each node given its parent (1.0 for the root).
    # Used by rejection sampling and the confidence-adaptive tree size.
    probs: np.ndarray

    @property
    def size(self) -> int:
        return int(self.tokens.shape[0])

    @classmethod
    def of(cls, tokens: Sequence[int], parents: Sequence[int], probs: Sequence[float] | None = None) -> "DraftTree":
        """A tree from lists (probs default 1.0: a deterministic draft)."""
        n = len(tokens)
        return cls(tokens=np.asarray(tokens, dtype=np.int64).reshape(n),
                   parents=np.asarray(parents, dtype=np.int64).reshape(len(parents)),
                   probs=np.ones(n, np.float32) if probs is None else np.asarray(probs, dtype=np.float32))


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of verifying one tree."""

    path: tuple[int, ...]  # accepted node indices, root first (always contains 0)
    next_token: int  # the target's own token after the accepted path (bonus / correction)

    @property
    def accepted(self) -> int:
        """Draft tokens accepted (the root is not a draft token)."""
        return len(self.path) - 1


Parents = Sequence[int]  # or a [T] int64 array: every function below accepts either


# --- the contract -----------------------------------------------------------------------------


def check_parents(parents: Parents) -> list[int]:
    """The parent array as a list of ints, after checking it describes a tree rooted at node 0."""
    p = [int(x) for x in (parents.tolist() if hasattr(parents, "tolist") else parents)]
    if not p:
        raise TreeError("a draft tree needs at least its root", hint=TREE_HINT)
    if p[0] != -1:
        raise TreeError(f"parents[0] must be -1 (the root), got {p[0]}", hint=TREE_HINT)
    for i, q in enumerate(p[1:], start=1):
        if not 0 <= q < i:
            raise TreeError(f"parents[{i}] = {q}: a parent must come before its child", hint=TREE_HINT)
    return p


def check_tree(tokens: Sequence[int], parents: Parents) -> list[int]:
    """What `Backend.verify(tokens, parents)` accepts: one parent per token and a valid tree."""
    if len(tokens) != len(parents) or len(tokens) == 0:
        raise TreeError(f"verify got {len(tokens)} tokens and {len(parents)} parents",
                        hint="a draft tree needs one parent per token, root first")
    return check_parents(parents)


def check_path(path: Sequence[int], parents: Parents, *, checked: bool = False) -> list[int]:
    """What `Backend.commit(path)` accepts: node indices of the verified tree, starting at the
    root, each the parent of the next (`checked`: `parents` is what check_parents returned, as a
    backend keeps it from verify). -> the path as a list of ints."""
    p = parents if checked else check_parents(parents)
    nodes = [int(i) for i in path]
    if not nodes or nodes[0] != 0:
        raise TreeError(f"a committed path starts at the root (node 0), got {nodes}",
                        hint="pass node indices, root first, each the parent of the next")
    for a, b in zip(nodes, nodes[1:]):
        if not 0 < b < len(p) or p[b] != a:
            raise TreeError(f"commit path {nodes}: node {b} is not a child of node {a} in the last verified tree",
                            hint="pass node indices, root first, each the parent of the next")
    return nodes


# --- what a verifier derives from it --------------------------------------------------------------


def depth_list(parents: Parents) -> list[int]:
    """Depth of every node, root 0. Tree node i sits at position n_past + depth[i]."""
    p = check_parents(parents)
    d = [0] * len(p)
    for i in range(1, len(p)):
        d[i] = d[p[i]] + 1
    return d


def depths(parents: Parents) -> np.ndarray:
    """`depth_list` as a [T] int64 array."""
    return np.asarray(depth_list(parents), dtype=np.int64)


def is_chain(parents: Parents) -> bool:
    """Every node the only child of the one before (plain causal attention suffices)."""
    return all(q == i - 1 for i, q in enumerate(check_parents(parents)))


def leaves(parents: Parents) -> tuple[int, ...]:
    """Node indices without children, ascending."""
    p = check_parents(parents)
    has_child = [False] * len(p)
    for q in p[1:]:
        has_child[q] = True
    return tuple(i for i in range(len(p)) if not has_child[i])


def ancestor_mask(parents: Parents) -> np.ndarray:
    """[T, T] bool: mask[i, j] is True when j == i or j is an ancestor of i.

    This is the tree-attention mask over the tree's own nodes: node i may attend to exactly
    the tokens of its root-to-i path (the committed cache is visible to every node)."""
    p = check_parents(parents)
    n = len(p)
    mask = np.zeros((n, n), dtype=bool)  # [T, T]
    for i in range(n):
        if p[i] >= 0:
            mask[i] = mask[p[i]]  # a parent's row is complete before its children's
        mask[i, i] = True
    return mask


def paths(parents: Parents) -> np.ndarray:
    """Root-to-leaf node paths, one row per leaf in leaf-index order, padded with -1.

    [n_leaves, max_depth + 1] int64 (EAGLE's `retrieve_indices`)."""
    p = check_parents(parents)
    rows = [list(path_to(p, leaf)) for leaf in leaves(p)]
    width = max(len(r) for r in rows)
    out = np.full((len(rows), width), -1, dtype=np.int64)  # [L, D+1]
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def path_to(parents: Parents, node: int, *, checked: bool = False) -> tuple[int, ...]:
    """Node indices from the root to `node`, root first (`checked`: `parents` is what check_parents
    returned)."""
    p = parents if checked else check_parents(parents)
    if not 0 <= node < len(p):
        raise TreeError(f"node {node} is not in a tree of {len(p)} nodes", hint="pass a node index of the tree")
    out = [node]
    while p[out[-1]] >= 0:
        out.append(p[out[-1]])
    return tuple(out[::-1])


# --- building trees ---------------------------------------------------------------------------------


def chain(tokens: Sequence[int], probs: Sequence[float] | None = None) -> DraftTree:
    """A chain tree: tokens[0] is the root, every other token the only child of the one before."""
    n = len(tokens)
    q = [1.0] + list(probs if probs is not None else [1.0] * (n - 1))
    if len(q) != n:
        raise TreeError(f"{n} tokens need {n - 1} draft probabilities, got {len(q) - 1}",
                        hint="pass one probability per draft token (the root has none)")
    return DraftTree(
        tokens=np.asarray(tokens, dtype=np.int64),
        parents=np.arange(-1, n - 1, dtype=np.int64),
        probs=np.asarray(q, dtype=np.float32),
    )
