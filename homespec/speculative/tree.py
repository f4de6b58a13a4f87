"""EAGLE-2's dynamic draft tree (Li et al. 2024, arXiv 2406.16858, section 4; docs/speculative.md,
"Tree"): which nodes a drafter expands and which it keeps.

A drafter supplies child log-probabilities through a callback, full rows (`build_dynamic_tree`)
or its own k best per node (`grow_tree`, for a network that picks them on the device); the
builder decides which nodes to expand and which to keep, and returns a DraftTree under the tree
contract (homespec.contracts.tree). Pure numpy on the host, no model.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from homespec.contracts.tree import DraftTree

# step_fn(tokens, parent_rows, depth) -> log-probs [F, V] (numpy, any float type)
#   tokens:      [F] int64 target-vocabulary ids of the frontier nodes to expand
#   parent_rows: [F] int64 row of the *previous* step_fn call each node was drawn from
#                (-1 for the root, which is the only node of the first call)
#   depth:       depth of these frontier nodes (0 for the root)
# One call per depth level lets a drafter evaluate the whole level in one forward, each row
# attending to its own ancestors (tree attention): a row's ancestors are its parent row's
# ancestors plus the parent row itself.
StepFn = Callable[[np.ndarray, np.ndarray, int], np.ndarray]


def build_dynamic_tree(
    step_fn: StepFn,
    root: int,
    *,
    depth: int,
    topk: int,
    total: int,
    token_map: np.ndarray | None = None,
) -> DraftTree:
    """EAGLE-2's dynamic draft tree (Li et al. 2024, arXiv 2406.16858, section 4).

    Every candidate's score is its cumulative draft log-probability (the sum along its path).
    Level by level: the `topk` best-scoring candidates of the newest level are expanded, each
    proposing its `topk` most likely children; after `depth` levels, the best `total - 1`
    candidates of all levels are kept (plus the root). A child's score is its parent's plus a
    log-prob <= 0, so ordering by (score descending, creation order) puts every parent before
    its children and the kept set is closed under taking parents.

    depth: the longest path of draft tokens (levels below the root); topk=1 drafts a chain.
    token_map: [V_draft] int64 draft id -> target id, when the drafter's vocabulary is a subset.
    Returns a DraftTree whose probs are the draft's probability of each node given its parent.
    """
    def expand(level: int, tokens: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        logp = np.asarray(step_fn(tokens, rows, level), dtype=np.float64)  # [F, V]
        ids, lp = _top(logp, min(topk, logp.shape[-1]))  # [F, k] each, best first
        return (token_map[ids] if token_map is not None else ids), lp

    return grow_tree(expand, root, depth=depth, topk=topk, total=total)


# (level, frontier tokens [F], each one's parent row in the previous call [F]) -> ([F, k] child ids
# best first, [F, k] their log-probs)
Expand = Callable[[int, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


def grow_tree(expand: Expand, root: int, *, depth: int, topk: int, total: int) -> DraftTree:
    """EAGLE-2's dynamic tree (build_dynamic_tree's rule) over a drafter that names each node's
    best children itself: at level 0 `expand` is asked for the root's children (tokens = [root],
    rows = [-1]); at level l >= 1 for the children of the frontier nodes it was handed. A drafter
    that runs in llama.cpp picks the k best on its side (backends/llamacpp/head.py), so only k
    numbers per node cross into Python. topk=1 drafts a chain; probs are the draft's probability
    of each node given its parent."""
    if depth < 1 or topk < 1 or total < 2:
        raise ValueError(f"need depth >= 1, topk >= 1 and total >= 2 (got {depth}, {topk}, {total})")
    tokens: list[np.ndarray] = []  # per level: [n] target ids
    logps: list[np.ndarray] = []  # per level: [n] edge log-prob
    scores: list[np.ndarray] = []  # per level: [n] cumulative log-prob
    parent_of: list[np.ndarray] = []  # per level: [n] global candidate index of the parent, -1 = root
    n_before = 0  # candidates created in earlier levels
    f_tokens = np.array([root], dtype=np.int64)  # [F] the frontier
    f_rows = np.array([-1], dtype=np.int64)  # [F] its parents' rows in the previous call
    f_score = np.zeros(1, dtype=np.float64)  # [F]
    f_global = np.array([-1], dtype=np.int64)  # [F] candidate index, -1 = root
    for level in range(depth):
        ids, lp = expand(level, f_tokens, f_rows)  # [F, k] each
        k = min(topk, ids.shape[1])
        ids, lp = np.asarray(ids[:, :k], dtype=np.int64), np.asarray(lp[:, :k], dtype=np.float64)
        score = f_score[:, None] + lp  # [F, k]
        tokens.append(ids.reshape(-1))
        logps.append(lp.reshape(-1))
        scores.append(score.reshape(-1))
        parent_of.append(np.repeat(f_global, k))
        order = _best(score.reshape(-1), topk)  # the next frontier: this level's best topk
        f_rows, f_tokens = order // k, ids.reshape(-1)[order]
        f_score, f_global = score.reshape(-1)[order], n_before + order
        n_before += score.size
    return keep_best(root, np.concatenate(tokens), np.concatenate(logps), np.concatenate(scores),
                     np.concatenate(parent_of), total)


def keep_best(root: int, tokens: np.ndarray, logps: np.ndarray, scores: np.ndarray, parent_of: np.ndarray,
              total: int) -> DraftTree:
    """The root and the best `total - 1` candidates, in creation order (parents before children)."""
    keep = np.sort(_best(scores, total - 1))
    new_index = np.zeros(len(tokens) + 1, dtype=np.int64)  # global index + 1 -> node index (0: root)
    new_index[keep + 1] = np.arange(1, len(keep) + 1)
    parents = np.concatenate([[-1], new_index[parent_of[keep] + 1]]).astype(np.int64)
    return DraftTree(
        tokens=np.concatenate([[root], tokens[keep]]).astype(np.int64),
        parents=parents,
        probs=np.concatenate([[1.0], np.exp(logps[keep])]).astype(np.float32),
    )


def _top(logp: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k largest entries of each row of [F, V], largest first, ties to the lower index (as
    torch.topk and a greedy argmax resolve them) -> (ids [F, k] int64, values [F, k])."""
    if k < logp.shape[-1]:
        part = np.argpartition(-logp, k - 1, axis=-1)[:, :k]  # [F, k] the k best, unordered
        # a tie at the k-th value may have left out a lower index: widen the candidates to every
        # entry at least as large as the k-th, which is rarely more than k
        kth = np.take_along_axis(logp, part, -1).min(-1, keepdims=True)  # [F, 1]
        if int((logp >= kth).sum(-1).max()) > k:
            part = np.argsort(-logp, axis=-1, kind="stable")[:, :k]
    else:
        part = np.broadcast_to(np.arange(logp.shape[-1]), logp.shape)
    vals = np.take_along_axis(logp, part, -1)
    order = np.lexsort((part, -vals), axis=-1)[:, :k]  # value descending, then index ascending
    ids = np.take_along_axis(part, order, -1)
    return ids.astype(np.int64), np.take_along_axis(vals, order, -1)


def _best(scores: np.ndarray, n: int) -> np.ndarray:
    """Indices of the n highest scores, highest first, ties in index order (a stable sort)."""
    return np.argsort(-scores, kind="stable")[:n]
