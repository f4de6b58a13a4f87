"""Draft trees: EAGLE-2's dynamic tree builder and the masks / depths / paths a verifier needs.

Pure torch, no model. A drafter supplies child log-probabilities through a callback; the
builder decides which nodes to expand and which to keep (docs/speculative.md, "Tree").

Conventions: node 0 is the root (the last emitted token); `parents[0] == -1` and
`parents[i] < i`, so any loop over nodes in index order sees a parent before its children.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from homespec.speculative.types import DraftTree

# step_fn(tokens, parent_rows, depth) -> log-probs [F, V]
#   tokens:      [F] int64 target-vocabulary ids of the frontier nodes to expand
#   parent_rows: [F] int64 row of the *previous* step_fn call each node was drawn from
#                (-1 for the root, which is the only node of the first call)
#   depth:       depth of these frontier nodes (0 for the root)
# One call per depth level lets a drafter evaluate the whole level in one forward, each row
# attending to its own ancestors (tree attention): a row's ancestors are its parent row's
# ancestors plus the parent row itself.
StepFn = Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]


def check_parents(parents: Sequence[int] | torch.Tensor) -> list[int]:
    """The parent array as a list, after checking it describes a tree rooted at node 0."""
    p = [int(x) for x in (parents.tolist() if isinstance(parents, torch.Tensor) else parents)]
    if not p or p[0] != -1:
        raise ValueError(f"parents[0] must be -1 (the root), got {p[:1]}")
    for i, q in enumerate(p[1:], start=1):
        if not 0 <= q < i:
            raise ValueError(f"parents[{i}] = {q}: a parent must come before its child")
    return p


def depths(parents: Sequence[int] | torch.Tensor) -> torch.Tensor:
    """Depth of every node, root 0: [T] int64. Tree node i sits at position n_past + depth[i]."""
    p = check_parents(parents)
    d = [0] * len(p)
    for i in range(1, len(p)):
        d[i] = d[p[i]] + 1
    return torch.tensor(d, dtype=torch.int64)


def ancestor_mask(parents: Sequence[int] | torch.Tensor) -> torch.Tensor:
    """[T, T] bool: mask[i, j] is True when j == i or j is an ancestor of i.

    This is the tree-attention mask over the tree's own nodes: node i may attend to exactly
    the tokens of its root-to-i path (the committed cache is visible to every node)."""
    p = check_parents(parents)
    n = len(p)
    mask = torch.zeros(n, n, dtype=torch.bool)  # [T, T]
    for i in range(n):
        if p[i] >= 0:
            mask[i] = mask[p[i]]  # a parent's row is complete before its children's
        mask[i, i] = True
    return mask


def paths(parents: Sequence[int] | torch.Tensor) -> torch.Tensor:
    """Root-to-leaf node paths, one row per leaf in leaf-index order, padded with -1.

    [n_leaves, max_depth + 1] int64 (EAGLE's `retrieve_indices`)."""
    p = check_parents(parents)
    n = len(p)
    has_child = [False] * n
    for q in p[1:]:
        has_child[q] = True
    rows = []
    for leaf in range(n):
        if has_child[leaf]:
            continue
        path = [leaf]
        while p[path[-1]] >= 0:
            path.append(p[path[-1]])
        rows.append(path[::-1])
    width = max(len(r) for r in rows)
    out = torch.full((len(rows), width), -1, dtype=torch.int64)  # [L, D+1]
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=torch.int64)
    return out


def path_to(parents: Sequence[int] | torch.Tensor, node: int) -> tuple[int, ...]:
    """Node indices from the root to `node`, root first."""
    p = check_parents(parents)
    out = [node]
    while p[out[-1]] >= 0:
        out.append(p[out[-1]])
    return tuple(out[::-1])


def chain(tokens: Sequence[int], probs: Sequence[float] | None = None) -> DraftTree:
    """A chain tree: tokens[0] is the root, every other token the only child of the one before."""
    n = len(tokens)
    q = [1.0] + list(probs if probs is not None else [1.0] * (n - 1))
    if len(q) != n:
        raise ValueError(f"{n} tokens need {n - 1} draft probabilities, got {len(q) - 1}")
    return DraftTree(
        tokens=torch.tensor(list(tokens), dtype=torch.int64),
        parents=torch.arange(-1, n - 1, dtype=torch.int64),
        probs=torch.tensor(q, dtype=torch.float32),
    )


def build_dynamic_tree(
    step_fn: StepFn,
    root: int,
    *,
    depth: int,
    topk: int,
    total: int,
    token_map: torch.Tensor | None = None,
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
    if depth < 1 or topk < 1 or total < 2:
        raise ValueError(f"need depth >= 1, topk >= 1 and total >= 2 (got {depth}, {topk}, {total})")
    cand_token: list[torch.Tensor] = []  # per level: [n] target ids
    cand_logp: list[torch.Tensor] = []  # per level: [n] edge log-prob
    cand_score: list[torch.Tensor] = []  # per level: [n] cumulative log-prob
    cand_parent: list[torch.Tensor] = []  # per level: [n] global candidate index of the parent, -1 = root
    n_before = 0  # candidates created in earlier levels

    frontier_tokens = torch.tensor([root], dtype=torch.int64)  # [F]
    frontier_rows = torch.tensor([-1], dtype=torch.int64)  # [F]
    frontier_score = torch.zeros(1, dtype=torch.float64)  # [F]
    frontier_global = torch.tensor([-1], dtype=torch.int64)  # [F] candidate index, -1 = root
    for level in range(depth):
        logp = step_fn(frontier_tokens, frontier_rows, level).to(torch.float64)  # [F, V]
        k = min(topk, logp.shape[-1])
        top_lp, top_id = torch.topk(logp, k, dim=-1)  # [F, k]
        if token_map is not None:
            top_id = token_map.to(top_id.device)[top_id]
        top_id = top_id.cpu()
        top_lp = top_lp.cpu()
        score = frontier_score[:, None] + top_lp  # [F, k]
        cand_token.append(top_id.reshape(-1))
        cand_logp.append(top_lp.reshape(-1))
        cand_score.append(score.reshape(-1))
        cand_parent.append(frontier_global[:, None].expand(-1, k).reshape(-1))
        n_level = score.numel()
        # The next frontier: the best `topk` of this level (stable, so ties keep creation order).
        order = torch.sort(score.reshape(-1), descending=True, stable=True).indices[:topk]
        frontier_rows = order // k
        frontier_tokens = top_id.reshape(-1)[order]
        frontier_score = score.reshape(-1)[order]
        frontier_global = n_before + order
        n_before += n_level

    tokens = torch.cat(cand_token)
    logps = torch.cat(cand_logp)
    scores = torch.cat(cand_score)
    parent_of = torch.cat(cand_parent)
    keep = torch.sort(scores, descending=True, stable=True).indices[: total - 1]
    keep = torch.sort(keep).values  # creation order: parents before children
    new_index = {int(g): i + 1 for i, g in enumerate(keep.tolist())}
    new_index[-1] = 0
    parents = [-1] + [new_index[int(parent_of[g])] for g in keep.tolist()]
    return DraftTree(
        tokens=torch.cat([torch.tensor([root], dtype=torch.int64), tokens[keep]]),
        parents=torch.tensor(parents, dtype=torch.int64),
        probs=torch.cat([torch.ones(1), logps[keep].exp().to(torch.float32)]),
    )
