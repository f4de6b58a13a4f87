"""Draft-tree helpers and the EAGLE-2 dynamic tree builder (numpy, no model)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from homespec.errors import TreeError
from homespec.contracts.tree import (ancestor_mask, build_dynamic_tree, chain, check_parents, check_path, check_tree,
                                       depth_list, depths, is_chain, leaves, path_to, paths)


@st.composite
def parent_arrays(draw, max_size: int = 40) -> list[int]:
    n = draw(st.integers(1, max_size))
    return [-1] + [draw(st.integers(0, i - 1)) for i in range(1, n)]


def _ancestors(parents: list[int], i: int) -> set[int]:
    out = set()
    while parents[i] >= 0:
        i = parents[i]
        out.add(i)
    return out


@given(parent_arrays())
@settings(max_examples=150, deadline=None)
def test_helpers_agree_with_brute_force(parents):
    n = len(parents)
    mask = ancestor_mask(parents)
    d = depths(parents)
    assert mask.shape == (n, n) and mask.dtype == np.bool_
    for i in range(n):
        anc = _ancestors(parents, i)
        assert int(d[i]) == len(anc)
        assert set(np.flatnonzero(mask[i]).tolist()) == anc | {i}
    retrieve = paths(parents)
    leaves = [i for i in range(n) if i not in parents[1:]]
    assert retrieve.shape == (len(leaves), int(d.max()) + 1)
    for row, leaf in zip(retrieve.tolist(), leaves):
        path = [x for x in row if x >= 0]
        assert path == list(path_to(parents, leaf))
        assert path[0] == 0 and path[-1] == leaf
        assert all(parents[b] == a for a, b in zip(path, path[1:]))
        assert all(x == -1 for x in row[len(path) :])


@given(parent_arrays())
@settings(max_examples=150, deadline=None)
def test_contract_helpers_agree_with_brute_force(parents):
    """The pure-Python half the backends call: depths, leaves, chains and committed paths."""
    n = len(parents)
    assert depth_list(parents) == depths(np.asarray(parents)).tolist() == [len(_ancestors(parents, i)) for i in range(n)]
    assert leaves(parents) == tuple(i for i in range(n) if i not in parents[1:])
    assert is_chain(parents) == (parents == list(range(-1, n - 1)))
    assert check_tree(list(range(n)), parents) == parents
    for node in range(n):
        path = list(path_to(parents, node))
        assert check_path(path, parents) == path
        if len(path) > 1:  # skipping a node, or starting below the root, breaks the path
            with pytest.raises(TreeError):
                check_path(path[:1] + path[2:] if len(path) > 2 else path[1:], parents)


@given(st.lists(st.integers(-2, 12), min_size=0, max_size=12))
@settings(max_examples=300, deadline=None)
def test_any_array_is_accepted_exactly_when_it_is_a_tree(parents):
    ok = bool(parents) and parents[0] == -1 and all(0 <= q < i for i, q in enumerate(parents) if i)
    if ok:
        assert check_parents(parents) == parents
    else:
        with pytest.raises(TreeError) as err:
            check_parents(parents)
        assert isinstance(err.value, ValueError) and err.value.hint
    with pytest.raises(TreeError):
        check_tree(list(range(len(parents) + 1)), parents)  # one token too many


@pytest.mark.parametrize("bad", [[0], [-1, 1], [-1, 0, 2], [-1, -1]])
def test_invalid_parents_rejected(bad):
    with pytest.raises(ValueError):
        check_parents(bad)


def test_chain_shape():
    t = chain([5, 6, 7], [0.5, 0.25])
    assert t.parents.tolist() == [-1, 0, 1]
    assert t.probs.tolist() == [1.0, 0.5, 0.25]
    assert paths(t.parents).tolist() == [[0, 1, 2]]


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
    from homespec.contracts.tree import _top

    rng = np.random.default_rng(seed)
    with np.errstate(divide="ignore"):
        logp = np.log(rng.integers(0, 4, size=(3, 9)) / 4.0)  # repeated values and -inf
    ids, vals = _top(logp, k)
    full = np.argsort(-logp, axis=-1, kind="stable")[:, :k]
    assert ids.tolist() == full.tolist()
    assert np.array_equal(vals, np.take_along_axis(logp, full, -1))
