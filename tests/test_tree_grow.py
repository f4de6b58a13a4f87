"""EAGLE-2's dynamic tree grown from each node's best children (homespec/contracts/tree.py: grow_tree):
pure numpy, no model."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from homespec.contracts.tree import check_parents, depth_list
from homespec.contracts.tree import grow_tree

V = 50


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _drafter(seed: int, topk: int):
    """A deterministic fake head: each node's children depend on its path (seeded per path)."""
    paths: list[list[tuple[int, ...]]] = [[()]]  # per call: the path of each row

    def logp_of(path: tuple[int, ...]) -> np.ndarray:
        rng = np.random.default_rng([seed, *path])
        return _log_softmax(rng.normal(size=V) * 3)

    def expand(level: int, tokens: np.ndarray, parents: np.ndarray):
        if level == 0:
            rows = [()]
        else:
            rows = [paths[-1][p] + (int(t),) for t, p in zip(tokens, parents)]
        paths.append(rows)
        lp = np.stack([logp_of(r) for r in rows])  # [F, V]
        ids = np.argsort(-lp, axis=1, kind="stable")[:, :topk]
        return ids, np.take_along_axis(lp, ids, axis=1)

    return expand, logp_of


@given(st.integers(0, 10_000), st.integers(1, 6), st.integers(1, 5), st.integers(2, 40))
@settings(max_examples=80, deadline=None)
def test_tree_is_closed_bounded_and_scored_by_its_paths(seed, depth, topk, total):
    expand, logp_of = _drafter(seed, topk)
    tree = grow_tree(expand, 7, depth=depth, topk=topk, total=total)
    parents = tree.parents.tolist()
    check_parents(parents)  # parents precede children
    assert tree.tokens[0] == 7 and tree.probs[0] == 1.0
    assert len(parents) <= total and max(depth_list(parents)) <= depth
    # each node's probability is the draft's probability of it after its own path
    for i in range(1, len(parents)):
        path, j = [], parents[i]
        while j > 0:
            path.append(int(tree.tokens[j]))
            j = parents[j]
        expected = np.exp(logp_of(tuple(reversed(path)))[int(tree.tokens[i])])
        assert np.isclose(tree.probs[i], expected, rtol=1e-5)


def test_a_one_wide_tree_is_the_greedy_chain():
    expand, logp_of = _drafter(3, 1)
    tree = grow_tree(expand, 0, depth=4, topk=1, total=5)
    assert tree.parents.tolist() == [-1, 0, 1, 2, 3]
    path: tuple[int, ...] = ()
    for t in tree.tokens[1:].tolist():
        assert t == int(np.argmax(logp_of(path)))
        path += (t,)


def test_the_best_total_are_kept():
    """With depth 1 the tree is the root and its best total-1 children, best first."""
    expand, logp_of = _drafter(11, 6)
    tree = grow_tree(expand, 0, depth=1, topk=6, total=4)
    assert tree.tokens[1:].tolist() == np.argsort(-logp_of(()), kind="stable")[:3].tolist()
