"""Greedy and sampled tree verification, and the Sampler's target distribution."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from homespec.contracts.tree import DraftTree, Verdict, check_parents
from homespec.errors import ContractError, UsageError
from homespec.speculative.sampling import Sampler, sample_from
from homespec.speculative.verify import verify_greedy, verify_lazy, verify_sampled


def _tree(tokens, parents, probs=None):
    return DraftTree.of(tokens, parents, probs)


def _onehot_logits(targets, vocab=8):
    logits = np.zeros((len(targets), vocab), dtype=np.float32)
    logits[np.arange(len(targets)), targets] = 5.0
    return logits


# --- greedy -------------------------------------------------------------------------------


def test_greedy_picks_longest_correct_path():
    #        0(root)
    #      /    \
    #   1:a=4   2:b=5
    #    |       |   \
    #  3:6     4:6   5:7
    #            |
    #          6:1
    tree = _tree([9, 4, 5, 6, 6, 7, 1], [-1, 0, 0, 1, 2, 2, 4])
    # target argmax after each node: root->5, a->6, b->6, n3->0, n4->1, n5->0, n6->2
    verdict = verify_greedy(tree, _onehot_logits([5, 6, 6, 0, 1, 0, 2]))
    assert verdict == Verdict(path=(0, 2, 4, 6), next_token=2)
    assert verdict.accepted == 3


def test_greedy_rejects_everything_gives_target_token():
    tree = _tree([9, 4, 5], [-1, 0, 0])
    assert verify_greedy(tree, _onehot_logits([3, 0, 0])) == Verdict(path=(0,), next_token=3)


def test_greedy_tie_break_matches_argmax():
    logits = np.zeros((2, 4), dtype=np.float32)
    logits[0, 1] = logits[0, 2] = 1.0  # a tie: argmax takes index 1
    assert verify_greedy(_tree([0, 2], [-1, 0]), logits).path == (0,)
    assert verify_greedy(_tree([0, 1], [-1, 0]), logits).path == (0, 1)


@st.composite
def trees_and_targets(draw):
    n = draw(st.integers(1, 25))
    vocab = draw(st.integers(2, 4))  # a tiny vocabulary makes long matches likely
    parents = [-1] + [draw(st.integers(0, i - 1)) for i in range(1, n)]
    tokens = [draw(st.integers(0, vocab - 1)) for _ in range(n)]
    targets = [draw(st.integers(0, vocab - 1)) for _ in range(n)]
    return tokens, parents, targets, vocab


@given(trees_and_targets())
@settings(max_examples=200, deadline=None)
def test_greedy_matches_brute_force(case):
    tokens, parents, targets, vocab = case
    verdict = verify_greedy(_tree(tokens, parents), _onehot_logits(targets, vocab))
    best = (0,)
    for node in range(len(tokens)):
        path = [node]
        while parents[path[-1]] >= 0:
            path.append(parents[path[-1]])
        path = path[::-1]
        if all(tokens[b] == targets[a] for a, b in zip(path, path[1:])) and len(path) > len(best):
            best = tuple(path)
    assert verdict.path == best
    assert verdict.next_token == targets[best[-1]]


@given(trees_and_targets())
@settings(max_examples=200, deadline=None)
def test_the_lazy_walk_reads_only_rows_after_matched_nodes_and_agrees(case):
    """verify_lazy (the engine's greedy step) gives verify_greedy's verdict, duplicate siblings and
    ties included, asking for each row at most once and only after nodes whose path matched."""
    tokens, parents, targets, vocab = case
    tree = _tree(tokens, parents)
    asked: list[int] = []
    verdict = verify_lazy(tree, lambda i: asked.append(i) or targets[i], len(tokens))
    assert verdict == verify_greedy(tree, _onehot_logits(targets, vocab))
    assert len(asked) == len(set(asked))
    matched = {0}
    for i in range(1, len(tokens)):  # index order sees parents first
        if parents[i] in matched and tokens[i] == targets[parents[i]]:
            matched.add(i)
    assert set(asked) <= matched and verdict.path[-1] in asked
    with pytest.raises(ContractError):
        verify_lazy(tree, targets.__getitem__, len(tokens) + 1)


def _fake_target_logits(context, vocab=5):
    """A deterministic 'model': next-token logits are a function of the last two tokens."""
    g = np.random.default_rng(1000 * context[-1] + (context[-2] if len(context) > 1 else 77))
    return (g.standard_normal(vocab) * 3).astype(np.float32)


@given(st.integers(0, 2**31 - 1))
@settings(max_examples=30, deadline=None)
def test_greedy_speculative_equals_plain_greedy(seed):
    vocab, steps = 5, 24
    plain = [1]
    while len(plain) < steps + 1:
        plain.append(int(_fake_target_logits(plain, vocab).argmax()))
    gen = np.random.default_rng(seed)
    out = [1]
    while len(out) < steps + 1:
        # a random draft tree: sometimes right, often wrong
        n = int(gen.integers(1, 8))
        parents = [-1] + [int(gen.integers(0, i)) for i in range(1, n)]
        tokens = [out[-1]] + gen.integers(0, vocab, n - 1).tolist()
        ctx = []
        for i in range(n):  # the context of node i: committed + path to i
            path = [i]
            while parents[path[-1]] >= 0:
                path.append(parents[path[-1]])
            ctx.append(out[:-1] + [tokens[j] for j in reversed(path)])
        logits = np.stack([_fake_target_logits(c, vocab) for c in ctx])
        verdict = verify_greedy(_tree(tokens, parents), logits)
        out += [tokens[i] for i in verdict.path[1:]] + [verdict.next_token]
    assert out[: steps + 1] == plain


# --- sampler ------------------------------------------------------------------------------


def test_sampler_filters():
    logits = np.log(np.array([0.5, 0.2, 0.15, 0.1, 0.05], dtype=np.float32))
    np.testing.assert_allclose(Sampler(temperature=1.0).probs(logits), [0.5, 0.2, 0.15, 0.1, 0.05], rtol=1e-5)
    top2 = Sampler(temperature=1.0, top_k=2).probs(logits)
    np.testing.assert_allclose(top2, [5 / 7, 2 / 7, 0, 0, 0], rtol=1e-5)
    # top-p 0.8: 0.5 + 0.2 = 0.7 < 0.8, so 0.15 is needed too
    topp = Sampler(temperature=1.0, top_p=0.8).probs(logits)
    np.testing.assert_allclose(topp, np.array([0.5, 0.2, 0.15, 0, 0]) / 0.85, rtol=1e-5)
    assert Sampler().probs(logits).tolist() == [1.0, 0, 0, 0, 0]
    hot = Sampler(temperature=0.5).probs(logits)
    e = np.exp(logits / 0.5)
    np.testing.assert_allclose(hot, e / e.sum(), rtol=1e-5)


@pytest.mark.parametrize("kwargs", [{"temperature": -1}, {"top_k": -2}, {"top_p": 0.0}, {"top_p": 1.5}])
def test_sampler_rejects_bad_settings(kwargs):
    with pytest.raises(UsageError):
        Sampler(**kwargs)


def test_sampler_seed_reproducible():
    s = Sampler(temperature=1.0, seed=7)
    logits = np.random.default_rng(0).standard_normal((3, 50)).astype(np.float32)
    a = s.sample(logits, s.generator())
    b = s.sample(logits, s.generator())
    assert a.tolist() == b.tolist() and a.shape == (3,)


# --- sampled verification: the output distribution equals the target's ----------------------

def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


VOCAB = 4
P1 = np.array([0.4, 0.3, 0.2, 0.1])  # target after the root
_G = np.random.default_rng(3)
P2 = _softmax(_G.standard_normal((VOCAB, VOCAB)) * 1.5)  # P2[x1]: target after x1
P3 = _softmax(_G.standard_normal((VOCAB, VOCAB, VOCAB)) * 1.5)  # P3[x1, x2]
Q1 = np.array([0.1, 0.2, 0.3, 0.4])  # a draft that disagrees with the target
Q2 = _softmax(_G.standard_normal((VOCAB, VOCAB)))
SAMPLER = Sampler(temperature=1.0)
CHI2_CRIT = 37.70  # chi-square, 15 degrees of freedom, p = 0.001


def _topk_tree():
    # root -> 0, 1 (the draft's top-2, fixed); 0 -> 2; 1 -> 3 and 0
    tokens = [9, 0, 1, 2, 3, 0]
    parents = [-1, 0, 0, 1, 2, 2]
    return _tree(tokens, parents), None


def _sampled_tree(gen):
    # root -> two children drawn i.i.d. from Q1; each child -> one child drawn from Q2[child]
    a, b = sample_from(np.broadcast_to(Q1, (2, VOCAB)), gen).tolist()
    a2, b2 = sample_from(Q2[[a, b]], gen).tolist()
    tree = _tree([9, a, b, a2, b2], [-1, 0, 0, 1, 2])
    dists = np.stack([Q1, Q2[a], Q2[b], Q1, Q1])  # rows for leaves are never used
    return tree, dists


_LOGITS_CACHE: dict[tuple, np.ndarray] = {}


def _logits_for(tree):
    key = (tuple(tree.tokens.tolist()), tuple(tree.parents.tolist()))
    if key not in _LOGITS_CACHE:
        _LOGITS_CACHE[key] = _target_logits(tree)
    return _LOGITS_CACHE[key]


def _target_logits(tree):
    rows = []
    for i, p in enumerate(tree.parents.tolist()):
        depth_path = []
        j = i
        while j > 0:
            depth_path.append(int(tree.tokens[j]))
            j = int(tree.parents[j])
        depth_path = depth_path[::-1]
        dist = P1 if not depth_path else P2[depth_path[0]] if len(depth_path) == 1 else P3[depth_path[0], depth_path[1]]
        rows.append(np.log(dist))
    return np.stack(rows).astype(np.float32)


def _first_two(verify, make_tree, trials, seed):
    gen = np.random.default_rng(seed)
    counts = np.zeros((VOCAB, VOCAB))
    for _ in range(trials):
        tree, dists = make_tree(gen) if make_tree is _sampled_tree else make_tree()
        verdict = verify(tree, _logits_for(tree), SAMPLER, gen, dists)
        emitted = [int(tree.tokens[i]) for i in verdict.path[1:]] + [verdict.next_token]
        if len(emitted) == 1:  # the next step would be plain decoding from the target
            emitted.append(int(sample_from(P2[emitted[0]], gen)))
        counts[emitted[0], emitted[1]] += 1
    return counts


def _chi2(counts):
    expected = (P1[:, None] * P2) * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())


def _broken_verify(tree, logits, sampler, gen, dists):
    """The same walk with a wrong residual: the next token comes from p, not the residual."""
    parents = check_parents(tree.parents)
    kids = [[c for c in range(len(parents)) if parents[c] == u] for u in range(len(parents))]
    path = [0]
    while True:
        u = path[-1]
        p = sampler.probs(logits[u]).astype(np.float64)
        r = p.copy()
        nxt = None
        for c in kids[u]:
            x = int(tree.tokens[c])
            coin = float(gen.random())
            if dists is None:
                if coin * float(r.sum()) < float(r[x]):
                    nxt = c
                    break
                r[x] = 0.0
            else:
                q = dists[u]
                if coin * float(q[x]) < float(r[x]):
                    nxt = c
                    break
                r = np.maximum(r - q, 0)
                r = r / r.sum()
        if nxt is None:
            return Verdict(tuple(path), int(sample_from(p, gen)))  # BUG on purpose: p, not r
        path.append(nxt)


@pytest.mark.slow
@pytest.mark.parametrize("make_tree", [_topk_tree, _sampled_tree], ids=["topk-children", "sampled-children"])
def test_sampled_verification_preserves_target_distribution(make_tree):
    trials = 4000
    good = _first_two(verify_sampled, make_tree, trials, seed=11)
    print(f"chi2 correct={_chi2(good):.1f}", end=" ")
    assert _chi2(good) < CHI2_CRIT
    # total variation between empirical and target joint distributions
    tv = 0.5 * float(np.abs(good / trials - P1[:, None] * P2).sum())
    assert tv < 0.04
    # The same test must catch a verifier whose residual is wrong.
    broken = _first_two(_broken_verify, make_tree, trials, seed=11)
    print(f"broken={_chi2(broken):.1f}")
    assert _chi2(broken) > 3 * CHI2_CRIT


def test_sampled_verification_greedy_sampler_is_greedy():
    tree = _tree([9, 4, 5], [-1, 0, 0])
    logits = _onehot_logits([5, 1, 2])
    assert verify_sampled(tree, logits, Sampler(), None) == verify_greedy(tree, logits)


def test_sampled_verification_accepts_certain_draft():
    # target puts all mass on the drafted chain -> everything accepted
    tree = _tree([9, 1, 2], [-1, 0, 1])
    logits = np.full((3, 4), -1e9, dtype=np.float32)
    logits[0, 1] = logits[1, 2] = logits[2, 3] = 0.0
    verdict = verify_sampled(tree, logits, SAMPLER, np.random.default_rng(0))
    assert verdict == Verdict(path=(0, 1, 2), next_token=3)
