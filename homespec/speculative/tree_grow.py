"""EAGLE-2's dynamic draft tree over a drafter that names each node's best children itself.

Li et al. 2024 (arXiv 2406.16858, section 4). Every candidate's score is its cumulative draft
log-probability (the sum along its path). Level by level, the `topk` best-scoring candidates of
the newest level are expanded, each proposing its `topk` most likely children; after `depth`
levels the best `total - 1` candidates of all levels are kept, plus the root. A child's score is
its parent's plus a log-prob <= 0, so ordering by (score descending, creation order) puts every
parent before its children, and the kept set is closed under taking parents.

`expand(level, tokens, rows)` is the drafter: at level 0 it is asked for the root's children
(tokens = [root], rows = [-1]); at level l >= 1 for the children of the frontier nodes it was
handed (`tokens` [F] their ids, `rows` [F] the row of each one's parent in the previous call).
It answers ([F, k] child ids best first, [F, k] their log-probs), where a drafter that runs in
llama.cpp has already picked the k best on its side (backends/llamacpp/head.py), so only k
numbers per node cross into Python. Pure numpy; tested without a model (tests/test_tree_grow.py).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from homespec.contracts.tree import DraftTree

Expand = Callable[[int, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


def grow_tree(expand: Expand, root: int, *, depth: int, topk: int, total: int) -> DraftTree:
    """The dynamic tree of at most `total` nodes (root included) and `depth` levels below the root;
    topk=1 drafts a chain. Its probs are the draft's probability of each node given its parent."""
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
        ids, lp = ids[:, :k], lp[:, :k].astype(np.float64)
        score = f_score[:, None] + lp  # [F, k]
        tokens.append(ids.reshape(-1))
        logps.append(lp.reshape(-1))
        scores.append(score.reshape(-1))
        parent_of.append(np.repeat(f_global, k))
        # the next frontier: this level's best `topk` (stable: ties keep creation order)
        order = np.argsort(-score.reshape(-1), kind="stable")[:topk]
        f_rows, f_tokens = order // k, ids.reshape(-1)[order]
        f_score, f_global = score.reshape(-1)[order], n_before + order
        n_before += score.size
    return _keep_best(root, np.concatenate(tokens), np.concatenate(logps), np.concatenate(scores),
                      np.concatenate(parent_of), total)


def _keep_best(root: int, tokens: np.ndarray, logps: np.ndarray, scores: np.ndarray, parent_of: np.ndarray,
               total: int) -> DraftTree:
    """The root and the best `total - 1` candidates, in creation order (parents before children)."""
    keep = np.sort(np.argsort(-scores, kind="stable")[: total - 1])
    new_index = np.zeros(len(tokens) + 1, dtype=np.int64)  # global index + 1 -> node index (0: root)
    new_index[keep + 1] = np.arange(1, len(keep) + 1)
    parents = np.concatenate([[-1], new_index[parent_of[keep] + 1]]).astype(np.int64)
    return DraftTree(
        tokens=np.concatenate([[root], tokens[keep]]).astype(np.int64),
        parents=parents,
        probs=np.concatenate([[1.0], np.exp(logps[keep])]).astype(np.float32),
    )
