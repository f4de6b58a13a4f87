"""Torch reference implementations of the speculative loop's small kernels.

These define the semantics the Triton, CUDA and Metal kernels in kernels/ must reproduce, and are
the fallback wherever none of those is usable. Every function works on any device; none loops in
Python over tree nodes (only over tree depth), so they are already far cheaper than per-node code.

Tree conventions (homespec.speculative.tree): node 0 is the root, parents[0] == -1, parents[i] < i.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True, slots=True)
class PathChoice:
    """An accepted root-first path as device tensors (no host sync until asked)."""

    path: torch.Tensor  # [T] int64: accepted node indices root first, then -1 padding
    length: torch.Tensor  # [] int64: nodes on the path (1 = only the root)
    next_token: torch.Tensor  # [] int64: the target's token after the path (bonus / correction)

    def to_verdict(self):
        from homespec.speculative.types import Verdict

        n = int(self.length)
        return Verdict(path=tuple(int(i) for i in self.path[:n].tolist()), next_token=int(self.next_token))


def _ancestry(parents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """anc [T, T] bool (anc[i, j]: j is i or an ancestor of i) and depth [T] int64.

    Every node climbs one level per iteration, so the loop runs max-depth times, not T times."""
    t = parents.shape[0]
    idx = torch.arange(t, device=parents.device)
    anc = torch.eye(t, dtype=torch.bool, device=parents.device)  # [T, T]
    depth = torch.zeros(t, dtype=torch.int64, device=parents.device)  # [T]
    cur = idx.clone()
    for _ in range(t):
        p = parents[cur]  # [T] parent of each node's current ancestor
        up = p >= 0
        if not bool(up.any()):
            break
        anc[idx[up], p[up]] = True
        depth += up.long()
        cur = torch.where(up, p, cur)
    return anc, depth


def verify_greedy_paths(tokens: torch.Tensor, parents: torch.Tensor, target: torch.Tensor) -> PathChoice:
    """Greedy tree acceptance: the deepest node whose every ancestor-or-self draft token equals
    the target's argmax after its parent; among equally deep nodes the lowest index wins (the
    rule of homespec.speculative.verify.verify_greedy).

    tokens, parents, target: [T] int64; target[i] = argmax of the target's logits at node i.
    """
    t = tokens.shape[0]
    anc, depth = _ancestry(parents)
    par = parents.clamp_min(0)
    correct = (tokens == target[par]) | (parents < 0)  # [T] node matches the target after its parent
    # ok[i]: every node on root..i is correct (anc rows select the path)
    ok = ~(anc & ~correct[None, :]).any(dim=1)  # [T]
    idx = torch.arange(t, device=tokens.device)
    key = torch.where(ok, depth * t + (t - 1 - idx), torch.full_like(depth, -1))  # deeper first, then lower index
    best = (t - 1) - key.max() % t
    n = depth[best] + 1
    path = torch.full((t,), -1, dtype=torch.int64, device=tokens.device)
    on = anc[best]  # [T] nodes on the accepted path
    path[depth[on]] = idx[on]  # a path has exactly one node per depth
    return PathChoice(path=path, length=n, next_token=target[best].long())


def verify_sampled_paths(
    tokens: torch.Tensor,
    parents: torch.Tensor,
    probs: torch.Tensor,
    coins: torch.Tensor,
    u_final: float,
) -> PathChoice:
    """Tree rejection sampling with deterministic children and explicit uniforms.

    probs: [T, V] the target's (sampler-processed) distribution after each node.
    coins: [T] uniforms in [0, 1); coins[c] decides child c when it is tried.
    u_final: a uniform in [0, 1) for the token drawn from the final residual.

    At node u the children are tried in index order: child c (token x) is accepted when
    coins[c] * sum(r) < r[x], where r is p[u] with every earlier-rejected child's token zeroed;
    a rejected child's token is zeroed. This is homespec.speculative.verify.verify_sampled's
    deterministic-children rule with its random draws made explicit, so a kernel and this
    reference give identical answers. With no child accepted the next token is the inverse-CDF
    draw of u_final from r (the first index whose cumulative mass exceeds u_final * sum(r)).
    """
    t = tokens.shape[0]
    par = parents.tolist()
    tok = tokens.tolist()
    path = [0]
    while True:
        u = path[-1]
        r = probs[u].clone()  # [V] residual, unnormalised
        accepted = -1
        for c in range(u + 1, t):
            if par[c] != u:
                continue
            x = tok[c]
            mass = r.sum()
            if mass > 0 and coins[c] * mass < r[x]:
                accepted = c
                break
            r[x] = 0
        if accepted < 0:
            total = r.sum()
            if total > 0:
                over = torch.cumsum(r, 0) > u_final * total
                nxt = int(torch.nonzero(over)[0])
            else:  # only reachable through rounding: every token of p was a rejected child
                nxt = int(probs[u].argmax())
            break
        path.append(accepted)
    out = torch.full((t,), -1, dtype=torch.int64, device=tokens.device)
    out[: len(path)] = torch.tensor(path, dtype=torch.int64, device=tokens.device)
    return PathChoice(path=out, length=torch.tensor(len(path), device=tokens.device),
                      next_token=torch.tensor(nxt, device=tokens.device))


def compact_kv(k_cache: torch.Tensor, v_cache: torch.Tensor, start: int, nodes: torch.Tensor) -> None:
    """Move the KV rows of accepted tree nodes into contiguous slots, in place.

    k_cache, v_cache: [L, Hkv, C, D] (homespec.models.llama's layout); node j of the last forward
    sits in slot start + j; nodes: [n] int64, root first, increasing. Afterwards slot start + i
    holds node nodes[i]'s row. Advanced indexing gathers before it scatters, so sources that are
    also destinations are read before they are overwritten.
    """
    n = int(nodes.shape[0])
    src = nodes.to(k_cache.device) + start  # [n]
    dst = slice(start, start + n)
    k_cache[:, :, dst] = k_cache[:, :, src]
    v_cache[:, :, dst] = v_cache[:, :, src]


def tree_mask(parents: torch.Tensor, n_past: int) -> torch.Tensor:
    """[T, n_past + T] bool attention mask of a tree verified after n_past committed tokens:
    every node sees the whole committed prefix and, among the tree, itself and its ancestors."""
    t = parents.shape[0]
    anc, _ = _ancestry(parents)
    mask = torch.ones(t, n_past + t, dtype=torch.bool, device=parents.device)
    mask[:, n_past:] = anc
    return mask
