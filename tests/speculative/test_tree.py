"""The tree contract (homespec.contracts.tree): its checks and what a verifier derives from it (pure, no model)."""

from __future__ import annotations


import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from homespec.errors import TreeError
from homespec.contracts.tree import (ancestor_mask, chain, check_parents, check_path, check_tree, depth_list, depths,
                                     is_chain, leaves, path_to, paths)


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
