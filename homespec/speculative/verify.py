"""Lossless verification of a draft tree against the target's logits for every tree node.

`logits[i]` is the target's next-token logits after the path root..i (one `Backend.verify`
pass). Both verifiers walk down from the root; the identities that make them lossless are
derived in docs/speculative.md ("Verification"). numpy on the host, over the logits the backend
handed out: a walk of at most T nodes, each an argmax or a few residual updates over one row.
homespec.kernels holds device versions of the same two walks (Triton, CUDA, Metal) and their
torch reference, tested against `greedy_path` and `sampled_path` here (docs/kernels.md).
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from homespec.contracts.tree import DraftTree, Verdict, check_parents, path_to
from homespec.errors import ContractError
from homespec.speculative.sampling import Sampler, inverse_cdf, sample_from


def _children(parents: list[int]) -> list[list[int]]:
    kids: list[list[int]] = [[] for _ in parents]
    for i, p in enumerate(parents[1:], start=1):
        kids[p].append(i)
    return kids


def _check_shapes(tree: DraftTree, logits: np.ndarray) -> None:
    if logits.ndim != 2 or logits.shape[0] != tree.size:
        raise ContractError(f"logits must be [T={tree.size}, V], got {tuple(logits.shape)}",
                            hint="pass the logits of one Backend.verify of this tree")


def verify_greedy(tree: DraftTree, logits: np.ndarray) -> Verdict:
    """The longest path whose every draft token is the target's argmax after its parent.

    Node i is correct when tokens[i] == argmax(logits[parents[i]]) and accepted when it and all
    its ancestors are correct. Accepted nodes form one path (a node has one argmax), except
    that duplicate siblings may both match: the lower index wins. argmax ties resolve as in
    plain greedy decoding (numpy.argmax: the first maximal index), so the emitted tokens are
    exactly plain greedy decoding's.
    """
    _check_shapes(tree, logits)
    return verify_picks(tree, logits.argmax(-1))  # [T] the target's greedy token after each node


def verify_picks(tree: DraftTree, target: np.ndarray) -> Verdict:
    """verify_greedy from the target's argmax after each node, `target` [T]."""
    if target.shape != (tree.size,):
        raise ContractError(f"greedy picks must be [T={tree.size}], got {tuple(target.shape)}",
                            hint="pass one argmax per node of this tree")
    parents = check_parents(tree.parents)  # a malformed tree is refused before the walk
    return greedy_path(tree.tokens.tolist(), parents, target.tolist())


def verify_lazy(tree: DraftTree, pick: Callable[[int], int], n_rows: int) -> Verdict:
    """verify_picks with the target's argmax read only where the walk needs it: after the nodes
    whose whole path matched (a few of a 48-node tree), each at most once. `pick(i)`: the argmax
    of node i's logits row (Forward.pick), of `n_rows` rows (Forward.n_nodes). The same verdict as
    arg-maxing every row first."""
    if n_rows != tree.size:
        raise ContractError(f"greedy picks need a row for each of the tree's {tree.size} nodes, got {n_rows}",
                            hint="pass the Forward of one verify of this tree")
    parents = check_parents(tree.parents)
    seen: dict[int, int] = {}

    def once(i: int) -> int:
        if i not in seen:
            seen[i] = int(pick(i))
        return seen[i]

    return greedy_path(tree.tokens.tolist(), parents, once)


def greedy_path(tokens: Sequence[int], parents: Sequence[int],
                target: Sequence[int] | Callable[[int], int]) -> Verdict:
    """Greedy tree acceptance over a checked tree: the deepest node whose every ancestor-or-self
    draft token equals the target's argmax after its parent; among equally deep nodes the lowest
    index wins. One pass in index order sees every parent before its children, so a node is
    accepted when its parent is and its own token matches. target[i] (or target(i)): the argmax
    at node i, asked for only after nodes whose path matched."""
    at = target if callable(target) else target.__getitem__
    ok = [True] * len(parents)  # ok[i]: every node on root..i matches
    depth = [0] * len(parents)
    best = 0
    for i in range(1, len(parents)):
        p = parents[i]
        depth[i] = depth[p] + 1
        ok[i] = ok[p] and tokens[i] == at(p)
        if ok[i] and depth[i] > depth[best]:  # strictly deeper: the lower index keeps a tie
            best = i
    return Verdict(path=path_to(parents, best, checked=True), next_token=int(at(best)))


def verify_sampled(
    tree: DraftTree,
    logits: np.ndarray,
    sampler: Sampler,
    generator: np.random.Generator | None = None,
    draft_dists: np.ndarray | None = None,
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
    gen = generator if generator is not None else np.random.default_rng()
    p_all = sampler.probs(logits).astype(np.float64)  # [T, V]
    if draft_dists is None:
        return _verify_deterministic(tree, parents, p_all, gen)
    kids = _children(parents)
    tokens = tree.tokens.tolist()
    q_all = np.asarray(draft_dists, dtype=np.float64)  # [T, V]
    path = [0]
    while True:
        u = path[-1]
        r = p_all[u].copy()  # [V] the residual, unnormalised
        accepted = None
        for c in kids[u]:
            x = tokens[c]
            coin = float(gen.random())
            q = q_all[u]
            if coin * float(q[x]) < float(r[x]):  # coin < min(1, r/q)
                accepted = c
                break
            left = np.maximum(r - q, 0.0)
            total = float(left.sum())
            if total > 0:  # total == 0 only when r == q, where rejection has probability 0
                r = left / total
        if accepted is None:
            return Verdict(path=tuple(path), next_token=int(sample_from(r, gen)))
        path.append(accepted)


def _verify_deterministic(tree: DraftTree, parents: list[int], p_all: np.ndarray,
                          gen: np.random.Generator) -> Verdict:
    """Deterministic children through `sampled_path`. Every child is tried at most once, so
    drawing its coin up front is the same as drawing it when tried, and the inverse-CDF draw of
    one uniform from the residual is a draw from the normalised residual."""
    coins = gen.random(tree.size)  # [T]: coins[c] decides child c
    u_final = float(gen.random())  # the residual draw
    return sampled_path(tree.tokens.tolist(), parents, p_all, coins, u_final)


def sampled_path(tokens: Sequence[int], parents: Sequence[int], probs: np.ndarray, coins: np.ndarray,
                 u_final: float) -> Verdict:
    """Tree rejection sampling with deterministic children and explicit uniforms, over a checked tree.

    probs: [T, V] the target's (sampler-processed) distribution after each node.
    coins: [T] uniforms in [0, 1); coins[c] decides child c when it is tried.
    u_final: a uniform in [0, 1) for the token drawn from the final residual.

    At node u the children are tried in index order: child c (token x) is accepted when
    coins[c] * sum(r) < r[x], where r is p[u] with every earlier-rejected child's token zeroed;
    a rejected child's token is zeroed. With no child accepted the next token is the inverse-CDF
    draw of u_final from r (the first index whose cumulative mass exceeds u_final * sum(r)).
    With the draws explicit, homespec.kernels' verify_sampled_paths gives the same answer.
    """
    kids = _children(list(parents))
    path = [0]
    while True:
        u = path[-1]
        r = probs[u].copy()  # [V] residual, unnormalised
        accepted = -1
        for c in kids[u]:
            x = tokens[c]
            mass = float(r.sum())
            if mass > 0 and coins[c] * mass < r[x]:
                accepted = c
                break
            r[x] = 0.0
        if accepted < 0:
            break
        path.append(accepted)
    if float(r.sum()) > 0:
        nxt = int(inverse_cdf(r[None, :], np.array([u_final]))[0])
    else:  # only reachable through rounding: every token of p was a rejected child
        nxt = int(probs[u].argmax())
    return Verdict(path=tuple(path), next_token=nxt)
