"""Lossless verification of a draft tree against the target's logits for every tree node.

`logits[i]` is the target's next-token logits after the path root..i (one `Backend.verify`
pass). Both verifiers walk down from the root; the identities that make them lossless are
derived in docs/speculative.md ("Verification"). Greedy and deterministic-children acceptance
run through homespec.kernels on the logits' device: one launch on a GPU, the torch reference
elsewhere (docs/kernels.md).
"""

from __future__ import annotations

import torch

from homespec import kernels
from homespec.contracts.tree import DraftTree, Verdict, check_parents
from homespec.errors import ContractError
from homespec.speculative.sampling import Sampler, sample_from


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
    check_parents(tree.parents)  # the kernels trust the tree: a malformed one is refused here
    dev = logits.device
    target = logits.argmax(-1)  # [T] the target's greedy token after each node
    return kernels.verify_greedy_paths(tree.tokens.to(dev), tree.parents.to(dev), target).to_verdict()


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
    p_all = sampler.probs(logits).double()  # [T, V]
    if draft_dists is None:
        return _verify_deterministic(tree, p_all, generator)
    kids = _children(parents)
    tokens = tree.tokens.tolist()
    q_all = draft_dists.double()  # [T, V]
    path = [0]
    while True:
        u = path[-1]
        r = p_all[u].clone()  # [V] the residual, unnormalised
        accepted = None
        for c in kids[u]:
            x = tokens[c]
            coin = float(torch.rand((), generator=generator, dtype=torch.float64))
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


def _verify_deterministic(tree: DraftTree, p_all: torch.Tensor, generator: torch.Generator | None) -> Verdict:
    """Deterministic children through kernels.verify_sampled_paths. Every child is tried at most
    once, so drawing its coin up front is the same as drawing it when tried, and the inverse-CDF
    draw of one uniform from the residual is a draw from the normalised residual."""
    dev = p_all.device
    coins = torch.rand(tree.size, generator=generator, dtype=torch.float64)  # [T]: coins[c] decides child c
    u_final = float(torch.rand((), generator=generator, dtype=torch.float64))  # the residual draw
    choice = kernels.verify_sampled_paths(tree.tokens.to(dev), tree.parents.to(dev), p_all, coins.to(dev), u_final)
    return choice.to_verdict()
