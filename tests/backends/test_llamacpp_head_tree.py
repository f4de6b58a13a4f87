"""A draft tree grown in one llama.cpp call (homespec's patch, backends/llamacpp/head_tree.py) against the
same tree grown level by level from Python (speculative/tree.py grow_tree over LlamaCppHead.level): the
shipped EAGLE-3.1 head on the embedded SmolLM2 GGUF, thread counts fixed so both make the same calls."""

from __future__ import annotations

import numpy as np
import pytest

from homespec.embedded import DEFAULT_HEAD
from homespec.errors import HomespecError
from tests.backends.test_head_llamacpp import _greedy_run

TEXTS = ("The capital of France is", "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n",
         "Once upon a time, there was a")


@pytest.fixture(scope="module")
def head_file(tmp_path_factory, smollm2_path):
    from homespec.backends.llamacpp.head_convert import head_gguf

    return head_gguf(DEFAULT_HEAD, smollm2_path, dtype="f16", cache_dir=tmp_path_factory.mktemp("heads"))


@pytest.fixture(scope="module")
def target(smollm2_path, head_file):
    from homespec.backends.llamacpp.backend import LlamaCppBackend
    from homespec.backends.llamacpp.head import read_head_file
    from homespec.backends.settings import BackendSettings

    be = LlamaCppBackend(smollm2_path, BackendSettings(n_ctx=1024, n_threads=2, adapt_threads=False))
    be.set_feature_layers(read_head_file(head_file.path, be.n_vocab).layers)
    yield be
    be.close()


def _net(head_file, target, *, lanes=2, topk=8, cells=1024):
    from homespec.backends.llamacpp.head import LlamaCppHead, read_head_file

    net = LlamaCppHead(read_head_file(head_file.path, target.n_vocab), target, lanes=lanes, cells_per_lane=cells,
                       topk=topk, n_threads=2)
    if net.native_tree is None:
        net.close()
        pytest.skip("this llama.cpp lacks homespec's patch (llama_homespec_grow_tree)")
    return net


def _drafter(net, target, *, depth, topk, total, window=None):
    from homespec.speculative.drafters.eagle3 import HeadDrafter

    return HeadDrafter(net, depth=depth, topk=topk, total=total, width=3 * target.hidden_size, window=window)


def _propose(net, drafter, root, context, *, native):
    """One proposal with the native tree on or off for this call."""
    keep = net.native_tree
    net.native_tree = keep if native else None
    try:
        return drafter.propose(root, context)
    finally:
        net.native_tree = keep


@pytest.mark.parametrize("one_call", ["step", "step-own-arrays", "tree"])
@pytest.mark.parametrize("shape, window", [((6, 8, 48), None), ((4, 4, 12), 6), ((5, 1, 6), None), ((1, 8, 9), None)])
def test_one_call_grows_the_tree_python_grows(head_file, target, shape, window, one_call, monkeypatch):
    """Two networks of two lanes follow the same greedy answer, accepting one to three tokens a step:
    one grows every tree in one call, the other level by level, lane 0 on some prompts and lane 1 on
    the others. The same nodes, parents and probabilities every step (the same llama.cpp calls on the
    same rows in the same cells), for the planner's 48-node tree, a windowed tree, a chain, one level;
    whether the one call drafts the whole step (llama_homespec_draft_tree: the encoder, the seed's
    entries, the tree and the best kept; its entries from the network's kept buffers, or from arrays of
    their own as a long catch-up's) or the tree alone (llama_homespec_grow_tree)."""
    from homespec.backends.llamacpp import head_tree

    if one_call == "step-own-arrays":
        monkeypatch.setattr(head_tree, "_KEPT_ENTRIES", 0)
    depth, topk, total = shape
    tok = target.tokenizer
    nets = [_net(head_file, target, topk=max(topk, 4)) for _ in range(2)]
    nets[1].native_tree = None  # level by level
    if one_call == "tree":
        nets[0].native_tree._draft = None
    elif not nets[0].native_tree.drafts:
        pytest.skip("this llama.cpp lacks llama_homespec_draft_tree")
    lanes = [[_drafter(net, target, depth=depth, topk=topk, total=total, window=window) for _ in range(2)]
             for net in nets]
    for j, text in enumerate(TEXTS):
        one, levels = (pair[j % 2] for pair in lanes)
        ids = tok.encode(text)
        fwd, steps = _greedy_run(target, ids, 13)
        one.begin(ids, fwd)
        levels.begin(ids, fwd)
        context, i, n_checked = list(ids), 0, 0
        while i < len(steps):
            root = steps[i][0]
            a, b = one.propose(root, context), levels.propose(root, context)
            assert a.tokens.tolist() == b.tokens.tolist() and a.parents.tolist() == b.parents.tolist(), (text, i)
            np.testing.assert_allclose(a.probs, b.probs, rtol=1e-6)
            n_checked += 1
            take = steps[i:i + 1 + i % 3]  # one, two or three tokens accepted
            tokens = [s[0] for s in take]
            feats = np.concatenate([s[1] for s in take])
            for d in (one, levels):
                d.accept(tokens, feats, take[-1][2])
            context += tokens
            i += len(take)
        assert n_checked >= 6
    assert nets[0].native_tree.calls >= 6 * len(TEXTS)  # the native calls ran
    drafted = nets[0].native_tree.drafted  # of them, whole steps drafted in one call
    assert drafted >= 6 * len(TEXTS) if one_call.startswith("step") else drafted == 0
    for net in nets:
        net.close()


def test_the_tree_leaves_the_heads_cache_as_it_found_it(head_file, target):
    """After a tree grown in one call, every tree id holds the committed entries and nothing past
    them: the next tree, grown either way, is the same."""
    tok = target.tokenizer
    net = _net(head_file, target, lanes=1)
    d = _drafter(net, target, depth=6, topk=8, total=48)
    ids = tok.encode(TEXTS[1])
    fwd, steps = _greedy_run(target, ids, 1)
    d.begin(ids, fwd)
    root = steps[0][0]
    first = _propose(net, d, root, ids, native=True)
    ll, mem = net._ll, net._mem
    seed_cell = len(ids) - 1
    for s in net._ids[0].committed:
        assert ll.llama_memory_seq_pos_max(mem, s) == seed_cell, s
    again = _propose(net, d, root, ids, native=False)
    assert again.tokens.tolist() == first.tokens.tolist() and again.parents.tolist() == first.parents.tolist()
    net.close()


def test_a_cache_too_small_for_the_tree_fails_with_llamacpps_reason(head_file, target):
    """A level that finds no cells fails as a level-by-level tree does (llama.cpp's code 1 and a hint), and
    the levels decoded before it leave the tree ids."""
    tok = target.tokenizer
    ids = tok.encode(TEXTS[1] * 12)[:250]
    net = _net(head_file, target, lanes=1, cells=len(ids))  # llama.cpp rounds its cells up to 256: one level fits
    assert net._ll.llama_n_ctx(net._ctx) < len(ids) + 5 * 8
    d = _drafter(net, target, depth=6, topk=8, total=48)
    fwd, steps = _greedy_run(target, ids, 1)
    d.begin(ids, fwd)
    with pytest.raises(HomespecError, match="code 1") as err:
        _propose(net, d, steps[0][0], ids, native=True)
    assert "larger --ctx" in err.value.hint
    for s in net._ids[0].tree:  # the levels it decoded are gone from every tree id
        assert net._ll.llama_memory_seq_pos_max(net._mem, s) <= len(ids) - 1
    net.close()
