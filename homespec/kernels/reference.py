"""Torch reference implementations of the speculative loop's small kernels.

These define the semantics the Triton, CUDA and Metal kernels beside this module must reproduce,
and are what runs wherever none of those is usable (CPU tensors, or a GPU without a toolchain).
Every function works on tensors of any device. Tree validation, depths, paths and ancestor
masks come from homespec.contracts.tree, the one home of the tree conventions: node 0 is the
root, parents[0] == -1, parents[i] < i.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from homespec.contracts.tree import Verdict, ancestor_mask, check_parents, depths, path_to


@dataclass(frozen=True, slots=True)
class PathChoice:
    """An accepted root-first path as device tensors (no host sync until asked)."""

    path: torch.Tensor  # [T] int64: accepted node indices root first, then -1 padding
    length: torch.Tensor  # [] int64: nodes on the path (1 = only the root)
    next_token: torch.Tensor  # [] int64: the target's token after the path (bonus / correction)

    def to_verdict(self):
        n = int(self.length)
        return Verdict(path=tuple(int(i) for i in self.path[:n].tolist()), next_token=int(self.next_token))


def _choice(path: tuple[int, ...], t: int, next_token: int, device: torch.device) -> PathChoice:
    out = torch.full((t,), -1, dtype=torch.int64)  # [T]
    out[: len(path)] = torch.tensor(path, dtype=torch.int64)
    return PathChoice(path=out.to(device), length=torch.tensor(len(path), device=device),
                      next_token=torch.tensor(next_token, device=device))


def verify_greedy_paths(tokens: torch.Tensor, parents: torch.Tensor, target: torch.Tensor) -> PathChoice:
    """Greedy tree acceptance: the deepest node whose every ancestor-or-self draft token equals
    the target's argmax after its parent; among equally deep nodes the lowest index wins
    (duplicate siblings may both match).

    tokens, parents, target: [T] int64; target[i] = argmax of the target's logits at node i.
    One pass in index order sees every parent before its children, so a node is accepted when
    its parent is and its own token matches.
    """
    par = check_parents(parents)
    tok, tgt = tokens.tolist(), target.tolist()
    depth = depths(par).tolist()
    ok = [True] * len(par)  # ok[i]: every node on root..i matches
    best = 0
    for i in range(1, len(par)):
        ok[i] = ok[par[i]] and tok[i] == tgt[par[i]]
        if ok[i] and depth[i] > depth[best]:  # strictly deeper: the lower index keeps a tie
            best = i
    return _choice(path_to(par, best), len(par), int(tgt[best]), tokens.device)


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
    a rejected child's token is zeroed. With no child accepted the next token is the inverse-CDF
    draw of u_final from r (the first index whose cumulative mass exceeds u_final * sum(r)).
    homespec.speculative.verify.sampled_path is the same rule in numpy (what the run path
    calls); with the draws explicit, a kernel, this reference and it give identical answers.
    """
    t = tokens.shape[0]
    par = check_parents(parents)
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
    return _choice(tuple(path), t, nxt, tokens.device)


def compact_kv(k_cache: torch.Tensor, v_cache: torch.Tensor, start: int, nodes: torch.Tensor) -> None:
    """Move the KV rows of accepted tree nodes into contiguous slots, in place.

    k_cache, v_cache: [L, Hkv, C, D] (homespec.nets.llama's layout); node j of the last forward
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
    mask = torch.ones(t, n_past + t, dtype=torch.bool, device=parents.device)  # [T, n_past + T]
    mask[:, n_past:] = torch.from_numpy(ancestor_mask(parents)).to(parents.device)  # [T, T], built on the host
    return mask
