"""Lossless verification of a draft tree against the target's logits for every tree node.

`logits[i]` is the target's next-token logits after the path root..i (one `Backend.verify`
pass). Both verifiers walk down from the root; the identities that make them lossless are
derived in docs/speculative.md ("Verification").
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from homespec.errors import ContractError
from homespec.speculative.sampling import Sampler, sample_from
from homespec.speculative.tree import DraftTree, check_parents


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of verifying one tree."""

    path: tuple[int, ...]  # accepted node indices, root first (always contains 0)
    next_token: int  # the target's own token after the accepted path (bonus / correction)

    @property
    def accepted(self) -> int:
        """Draft tokens accepted (the root is not a draft token)."""
        return len(self.path) - 1


def _children(parents: list[int]) -> list[list[int]]:
    kids: list[list[int]] = [[] for _ in parents]
    for i, p in enumerate(parents[1:], start=1):
        kids[p].append(i)
    return kids


def _check_shapes(tree: DraftTree, logits: torch.Tensor) -> None:
    if logits.dim() != 2 or logits.shape[0] != tree.size:
        raise ContractError(f"logits must be [T={tree.size}, V], got {tuple(logits.shape)}",
                            hint="pass the logits of one Backend.verify of this tree")


def verify_greedy(tree: DraftTree, logits: torch.Tensor) -> Verdict:
    """The longest path whose every draft token is the target's argmax after its parent.

    Node i is correct when tokens[i] == argmax(logits[parents[i]]) and accepted when it and all
    its ancestors are correct. Accepted nodes form one path (a node has one argmax), except
    that duplicate siblings may both match: the lower index wins. argmax ties resolve as in
    plain greedy decoding (torch.argmax: the first maximal index), so the emitted tokens are
    exactly plain greedy decoding's.
    """
    _check_shapes(tree, logits)
    parents = check_parents(tree.parents)
    target = logits.argmax(-1).tolist()  # [T] the target's greedy token after each node
    tokens = tree.tokens.tolist()
    ok = [True] + [False] * (len(parents) - 1)
    depth = [0] * len(parents)
    best = 0
    for i in range(1, len(parents)):
        p = parents[i]
        ok[i] = ok[p] and tokens[i] == target[p]
        depth[i] = depth[p] + 1
        if ok[i] and depth[i] > depth[best]:
            best = i
    path = [best]
    while parents[path[-1]] >= 0:
        path.append(parents[path[-1]])
    return Verdict(path=tuple(path[::-1]), next_token=int(target[best]))


def verify_sampled(
    tree: DraftTree,
    logits: torch.Tensor,
    sampler: Sampler,
    generator: torch.Generator | None = None,
    draft_dists: torch.Tensor | None = None,
) -> Verdict:
    """Tree rejection sampling: the emitted tokens are distributed exactly as the target's.

    At node u with target distribution p = sampler.probs(logits[u]) the children are tried in
    index order.

    * Deterministic children (top-k, n-gram lookup; `draft_dists` None): accept child x with
      probability r(x) / sum(r), where r is the residual (p with every rejected child's token
      zeroed); on rejection zero r(x). Child j is then reached with probability exactly p(x_j)
      and a token y outside the children is emitted with probability exactly p(y).
    * Children drawn i.i.d. from the draft's q (`draft_dists[u]` = q, [T, V]): accept x with
      probability min(1, r(x) / q(x)); on rejection r <- norm(max(r - q, 0)).

    When no child is accepted, the next token is drawn from the (normalised) residual.
    Greedy samplers take the greedy path (the one-hot limit of the same rule).
    """
    if sampler.greedy:
        return verify_greedy(tree, logits)
    _check_shapes(tree, logits)
    parents = check_parents(tree.parents)
    kids = _children(parents)
    tokens = tree.tokens.tolist()
    p_all = sampler.probs(logits).double()  # [T, V]
    q_all = draft_dists.double() if draft_dists is not None else None  # [T, V]
    path = [0]
    while True:
        u = path[-1]
        r = p_all[u].clone()  # [V] the residual, unnormalised
        accepted = None
        for c in kids[u]:
            x = tokens[c]
            coin = float(torch.rand((), generator=generator, dtype=torch.float64))
            if q_all is None:
                mass = float(r.sum())
                if mass > 0 and coin * mass < float(r[x]):
                    accepted = c
                    break
                r[x] = 0.0
            else:
                q = q_all[u]
                if coin * float(q[x]) < float(r[x]):  # coin < min(1, r/q)
                    accepted = c
                    break
                left = (r - q).clamp_min(0.0)
                total = float(left.sum())
                if total > 0:  # total == 0 only when r == q, where rejection has probability 0
                    r = left / total
        if accepted is None:
            return Verdict(path=tuple(path), next_token=int(sample_from(r, generator)))
        path.append(accepted)
