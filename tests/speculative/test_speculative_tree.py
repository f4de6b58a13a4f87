"""EAGLE-2's dynamic tree (homespec.speculative.tree): built from full log-prob rows (build_dynamic_tree)
and grown from each node's best children (grow_tree); pure numpy, no model."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from homespec.contracts.tree import check_parents, depth_list, depths
from homespec.speculative.tree import _top, build_dynamic_tree, grow_tree

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


def _fixed_step(table: dict[int, list[float]], vocab: int):
    """A fake drafter: the child distribution depends only on the expanded token."""

    calls = []

    def step(tokens, parent_rows, depth):
        calls.append((tokens.tolist(), parent_rows.tolist(), depth))
        rows = np.asarray([table.get(t, [1.0] * vocab) for t in tokens.tolist()])
        with np.errstate(divide="ignore"):  # a zero probability is a log-prob of -inf
            return np.log(rows / rows.sum(-1, keepdims=True))

    return step, calls


def test_dynamic_tree_by_hand():
    # vocab 4; from the root (token 0) the draft says 1: .6, 2: .3; from 1: 3: .9; from 2: 3: .5
    table = {0: [0.0, 0.6, 0.3, 0.1], 1: [0.02, 0.03, 0.05, 0.9], 2: [0.2, 0.1, 0.2, 0.5]}
    step, calls = _fixed_step(table, 4)
    tree = build_dynamic_tree(step, 0, depth=2, topk=2, total=4)
    # candidates: 1 (.6), 2 (.3); level 2: 1->3 (.54), 1->2 (.03), 2->3 (.15), 2->0/2 (.06)
    # best 3: 1 (.6), 1->3 (.54), 2 (.3) -> creation order: 1, 2, then 1->3
    assert tree.tokens.tolist() == [0, 1, 2, 3]
    assert tree.parents.tolist() == [-1, 0, 0, 1]
    np.testing.assert_allclose(tree.probs, [1.0, 0.6, 0.3, 0.9], rtol=1e-6)
    assert calls[0] == ([0], [-1], 0)
    assert calls[1] == ([1, 2], [0, 0], 1)  # both depth-1 nodes expanded in one call


@given(
    st.integers(1, 5),
    st.integers(1, 4),
    st.integers(2, 30),
    st.integers(0, 2**31 - 1),
)
@settings(max_examples=60, deadline=None)
def test_dynamic_tree_invariants(depth, topk, total, seed):
    vocab = 7
    gen = np.random.default_rng(seed)
    table = {t: (gen.random(vocab) + 0.01).tolist() for t in range(vocab)}
    step, calls = _fixed_step(table, vocab)
    tree = build_dynamic_tree(step, 3, depth=depth, topk=topk, total=total)
    parents = tree.parents.tolist()
    check_parents(parents)
    assert int(tree.tokens[0]) == 3
    assert tree.size <= total
    assert int(depths(parents).max()) <= depth
    assert len(calls) == depth
    assert all(len(c[0]) <= topk for c in calls)
    # Score of each node = sum of log-probs along its path; every kept node scores at least as
    # well as every dropped candidate would, so the kept set is the best by score.
    score = [0.0] * len(parents)
    for i in range(1, len(parents)):
        score[i] = score[parents[i]] + math.log(float(tree.probs[i]))
        assert score[i] <= score[parents[i]] + 1e-9
    if topk == 1:
        assert parents == list(range(-1, len(parents) - 1))  # a chain


def test_token_map_applies_to_tokens_and_expansion():
    # draft vocab of 3 mapped onto target ids 10, 20, 30
    seen = []

    def step(tokens, parent_rows, depth):
        seen.append(tokens.tolist())
        return np.log(np.array([[0.7, 0.2, 0.1]] * tokens.shape[0]))

    tree = build_dynamic_tree(step, 99, depth=2, topk=1, total=3, token_map=np.array([10, 20, 30]))
    assert tree.tokens.tolist() == [99, 10, 10]
    assert seen == [[99], [10]]  # the drafter is handed target ids


def test_ties_go_to_the_lower_id_as_greedy_verification_takes_them():
    """A drafted chain follows the same argmax tie-break as greedy verification: equal
    log-probs rank by id, so the lower id is drafted first."""
    def step(tokens, parent_rows, depth):
        return np.log(np.array([[0.1, 0.3, 0.3, 0.3]] * tokens.shape[0]))

    assert build_dynamic_tree(step, 0, depth=1, topk=1, total=2).tokens.tolist() == [0, 1]
    tree = build_dynamic_tree(step, 0, depth=1, topk=2, total=3)
    assert tree.tokens.tolist() == [0, 1, 2]


@given(st.integers(1, 6), st.integers(0, 2**31 - 1))
@settings(max_examples=60, deadline=None)
def test_top_k_matches_a_full_sort(k, seed):
    """The builder's top-k (a partition, then a sort of the k) equals a stable full sort of each
    row, ties and -inf entries included."""

    rng = np.random.default_rng(seed)
    with np.errstate(divide="ignore"):
        logp = np.log(rng.integers(0, 4, size=(3, 9)) / 4.0)  # repeated values and -inf
    ids, vals = _top(logp, k)
    full = np.argsort(-logp, axis=-1, kind="stable")[:, :k]
    assert ids.tolist() == full.tolist()
    assert np.array_equal(vals, np.take_along_axis(logp, full, -1))
