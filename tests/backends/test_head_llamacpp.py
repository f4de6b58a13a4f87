"""The EAGLE head in llama.cpp beside its target (backends/llamacpp/head.py) driven by homespec's drafting
policy (speculative/drafters/eagle3.py): the shipped EAGLE-3.1 head on the embedded SmolLM2 GGUF.

* its greedy chains are llama.cpp's own drafter's (heads/llamacpp_draft.py follows
  common/speculative.cpp) on the same head file;
* its trees are the torch reference head's (nets/eagle3_drafter.py) from the same target features;
* a head that slept through plain steps drafts, once woken, what a head that drafted every step drafts;
  so does a windowed head that skipped the entries its window no longer sees;
* trimming for a reused prefix leaves it where a fresh begin on the new prompt would be;
* the device's top-k (homespec's log-softmax sampler) picks what the host's would.
"""

from __future__ import annotations

import numpy as np
import pytest

from homespec.embedded import DEFAULT_HEAD
from homespec.errors import HomespecError
from homespec.plan.lines import LineKind

TEXTS = ("The capital of France is", "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n",
         "List three colours of the rainbow:", "Once upon a time, there was a")


@pytest.fixture(scope="module")
def head_file(tmp_path_factory, smollm2_path):
    from homespec.backends.llamacpp.head_convert import head_gguf

    return head_gguf(DEFAULT_HEAD, smollm2_path, dtype="f16", cache_dir=tmp_path_factory.mktemp("heads"))


@pytest.fixture(scope="module")
def target(smollm2_path, head_file):
    from homespec.backends.llamacpp.backend import LlamaCppBackend
    from homespec.backends.settings import BackendSettings
    from homespec.backends.llamacpp.head import read_head_file

    be = LlamaCppBackend(smollm2_path, BackendSettings(n_ctx=1024, n_threads=2))
    be.set_feature_layers(read_head_file(head_file.path, be.n_vocab).layers)  # before it decodes
    yield be
    be.close()


@pytest.fixture(scope="module")
def tok(target):
    return target.tokenizer


def _net(head_file, target, *, lanes=1, topk=4, window=None):
    from homespec.backends.llamacpp.head import LlamaCppHead, read_head_file

    info = read_head_file(head_file.path, target.n_vocab)
    target.set_feature_layers(info.layers)
    return LlamaCppHead(info, target, lanes=lanes, cells_per_lane=1024, topk=topk, n_threads=2)


def _drafter(net, target, *, depth=4, topk=4, total=12, window=None):
    from homespec.speculative.drafters.eagle3 import HeadDrafter

    return HeadDrafter(net, depth=depth, topk=topk, total=total, width=3 * target.hidden_size, window=window)


def _prefill(target, ids):
    target.reset()
    fwd = target.prefill(ids)
    return fwd, int(np.argmax(fwd.logits[-1]))


def test_chains_are_llamacpps_own_drafters(head_file, target, tok, smollm2_path):
    from homespec.heads.llamacpp_draft import LlamaCppEagle3

    net = _net(head_file, target, topk=1)
    d = _drafter(net, target, depth=4, topk=1, total=5)
    with LlamaCppEagle3(smollm2_path, head_file.path, n_ctx=1024, n_threads=2) as ref:
        for text in TEXTS:
            ids = tok.encode(text)
            fwd, root = _prefill(target, ids)
            d.begin(ids, fwd)
            tree = d.propose(root, ids)
            assert tree.parents.tolist() == [-1, 0, 1, 2, 3]
            assert tree.tokens[1:].tolist() == ref.draft(ids, 4).tokens, text
    net.close()


def _by_path(tree) -> dict[tuple[int, ...], float]:
    """Each node's token path from the root -> its draft probability."""
    paths: list[tuple[int, ...]] = []
    for t, p in zip(tree.tokens.tolist(), tree.parents.tolist()):
        paths.append((paths[p] if p >= 0 else ()) + (t,))
    return dict(zip(paths, tree.probs.tolist()))


def _alike(a, b, *, atol: float = 2e-2, parted: int = 2) -> bool:
    """Every node both trees hold has (nearly) the same draft probability, and at most `parted` nodes
    are in one tree only: candidates whose scores sit within fp16 rounding of the cut (or of a
    sibling) may be ordered either way by the two."""
    pa, pb = _by_path(a), _by_path(b)
    common = pa.keys() & pb.keys()
    return all(abs(pa[k] - pb[k]) <= atol for k in common) and len(pa.keys() - pb.keys()) <= parted


@pytest.mark.slow
def test_trees_are_the_torch_reference_heads(head_file, target, tok):
    """The same dynamic tree (depth 4, top-4, 12 nodes) from the same target features (the two differ by
    fp16 weights and rounding, so candidates at a near-tie may go either way: _alike)."""
    from homespec.nets.eagle3 import load_head
    from homespec.speculative.drafters.eagle3_torch import Eagle3Drafter

    net = _net(head_file, target)
    ours = _drafter(net, target)
    ref = Eagle3Drafter(load_head(DEFAULT_HEAD, target.n_layer, target.hidden_size, target.n_vocab), target,
                        depth=4, topk=4, total=12, window=None)
    for text in TEXTS:
        ids = tok.encode(text)
        fwd, root = _prefill(target, ids)
        ours.begin(ids, fwd)
        ref.begin(ids, fwd)
        a, b = ours.propose(root, ids), ref.propose(root, ids)
        assert _alike(a, b), (text, a, b)
    net.close()


def _greedy_run(target, ids, steps):
    """Plain greedy decoding: per step the committed token, its features and the next token."""
    fwd, root = _prefill(target, ids)
    out = []
    for _ in range(steps):
        f = target.verify([root], [-1])
        target.commit([0])
        nxt = int(np.argmax(f.logits[0]))
        out.append((root, f.features, nxt))
        root = nxt
    return fwd, out


@pytest.mark.parametrize("window", [None, 6])
def test_a_sleeping_head_wakes_to_the_drafts_of_one_that_never_slept(head_file, target, tok, window):
    """Two lanes of one network follow the same answer: lane 0 drafts every step (each draft rejected),
    lane 1 sleeps through the plain steps; then both draft. With a window, lane 1 keeps and writes only
    what its window sees, lane 0 drops what falls out of it: the same entries, the same tree."""
    ids = tok.encode(TEXTS[1])
    net = _net(head_file, target, lanes=2)
    fwd, steps = _greedy_run(target, ids, 12)
    awake, asleep = _drafter(net, target, window=window), _drafter(net, target, window=window)
    awake.begin(ids, fwd)
    asleep.begin(ids, fwd)
    context = list(ids)
    for root, feats, nxt in steps:
        awake.propose(root, context)
        awake.accept([root], feats, nxt)
        asleep.accept([root], feats, nxt)
        context.append(root)
        if window:  # asleep, it keeps no more rows than its window will see (the sinks written, the rest dropped)
            assert sum(len(f) for f in asleep._feats) <= 2 * window + asleep.sinks
    root = steps[-1][2]
    a, b = awake.propose(root, context), asleep.propose(root, context)
    # the same entries, written in batches of different sizes: float rounding apart
    assert a.tokens.tolist() == b.tokens.tolist() and a.parents.tolist() == b.parents.tolist()
    assert np.allclose(a.probs, b.probs, atol=2e-3)
    net.close()


def test_the_window_changes_what_the_head_sees(head_file, target, tok):
    ids = tok.encode(TEXTS[1] * 3)
    fwd, root = _prefill(target, ids)
    net = _net(head_file, target, lanes=2)
    full, short = _drafter(net, target, window=0), _drafter(net, target, window=4)
    full.begin(ids, fwd)
    short.begin(ids, fwd)
    a, b = full.propose(root, ids), short.propose(root, ids)
    assert not np.allclose(a.probs, b.probs, atol=1e-3) or a.tokens.tolist() != b.tokens.tolist()
    net.close()


def test_a_trimmed_head_drafts_as_a_fresh_one(head_file, target, tok):
    """trim(keep) for a prompt sharing its first `keep` tokens, then begin(kept=keep) with the rest's
    features: the drafts of a head begun afresh on the new prompt."""
    first, second = tok.encode(TEXTS[1]), tok.encode(TEXTS[1] + "def mul(a, b):\n")
    keep = len(first) - 1
    assert second[:keep] == first[:keep]
    net = _net(head_file, target, lanes=2)
    reused, fresh = _drafter(net, target), _drafter(net, target)
    fwd, root = _prefill(target, first)
    reused.begin(first, fwd)
    reused.propose(root, first)
    assert reused.trim(keep) == keep
    fwd2, root2 = _prefill(target, second)
    rest = type(fwd2)(logits=fwd2.logits, features=fwd2.features[keep:])
    reused.begin(second, rest, kept=keep)
    fresh.begin(second, fwd2)
    a, b = reused.propose(root2, second), fresh.propose(root2, second)
    assert a.tokens.tolist() == b.tokens.tolist() and np.allclose(a.probs, b.probs, atol=2e-3)
    net.close()


def test_a_windowed_head_trims_a_prompt_longer_than_its_cache(head_file, target, tok):
    """trim(keep) writes a long prompt's waiting entries as the window sees them (the next request reuses
    the prompt): a cache of a window's cells holds them, where writing every entry overflowed it
    (llama.cpp's code 1), and the drafts after are those of a head begun afresh with the same window."""
    from homespec.backends.llamacpp.head import LlamaCppHead, read_head_file
    from homespec.plan.memory import head_cells

    info = read_head_file(head_file.path, target.n_vocab)
    target.set_feature_layers(info.layers)
    net = LlamaCppHead(info, target, lanes=2, cells_per_lane=head_cells(1024, 16, info.sinks, 4, 4), topk=4,
                       n_threads=2)
    first = tok.encode(TEXTS[1] * 14)
    second = first + tok.encode(" and the end")
    assert len(first) > 256  # more than the head's cells, padded (16 + sinks + a tree's)
    reused, fresh = _drafter(net, target, window=16), _drafter(net, target, window=16)
    fwd, _ = _prefill(target, first)
    reused.begin(first, fwd)
    assert reused.trim(len(first)) == len(first) - 1  # the newest token's entry waits for its root
    fwd2, root2 = _prefill(target, second)
    keep = len(first) - 1
    reused.begin(second, type(fwd2)(logits=fwd2.logits, features=fwd2.features[keep:]), kept=keep)
    fresh.begin(second, fwd2)
    a, b = reused.propose(root2, second), fresh.propose(root2, second)
    assert a.tokens.tolist() == b.tokens.tolist() and np.allclose(a.probs, b.probs, atol=2e-3)
    net.close()


def test_the_device_picks_the_children_the_host_would(head_file, target, tok):
    from homespec.backends.llamacpp.head import LlamaCppHead, read_head_file

    info = read_head_file(head_file.path, target.n_vocab)
    target.set_feature_layers(info.layers)
    nets = [LlamaCppHead(info, target, lanes=1, cells_per_lane=1024, topk=6, n_threads=2, device_topk=on)
            for on in (True, False)]
    if not nets[0].device_topk:
        pytest.skip("this llama.cpp lacks homespec's patch: the host picks the children")
    assert not nets[1].device_topk
    drafters = [_drafter(net, target, depth=3, topk=6, total=20) for net in nets]
    trees = []
    for text in TEXTS:
        ids = tok.encode(text)
        fwd, root = _prefill(target, ids)
        pair = []
        for d in drafters:
            d.begin(ids, fwd)
            pair.append(d.propose(root, ids))
        trees.append(pair)
    for a, b in trees:
        assert a.tokens.tolist() == b.tokens.tolist() and a.parents.tolist() == b.parents.tolist()
        assert np.allclose(a.probs, b.probs, atol=1e-4)
    for net in nets:
        net.close()


@pytest.mark.parametrize("parallel", [1, 2])
def test_the_plan_budgets_what_the_head_allocates(parallel, tmp_path, monkeypatch):
    """Plan = run: llama.cpp's own buffer lines for the head (weights, KV, compute + output) against the
    plan's draft lines, within 5 % each, one lane (generate) and two (the engine serve opens)."""
    from homespec.engine.options import RunOptions
    from homespec.session import Session

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # the head converted afresh, not from a user's cache
    opt = RunOptions(method="eagle3", ctx=2048, draft_depth=4, draft_topk=4, draft_tokens=12, threads=2)
    if parallel == 1:
        session = Session.open(opt)
        try:
            mem = session.memory()
        finally:
            session.close()
        measured, planned = mem["measured"]["draft"], mem["planned"]["draft"]
    else:
        from homespec.engine.assemble import prepare
        from homespec.engine.setup import set_up

        parts = prepare(set_up(opt, parallel=parallel))
        try:
            net = parts.drafters[0].net
            rep = net.memory_report()
            measured = {"weights_bytes": rep.weights_bytes, "kv_bytes": rep.kv_bytes,
                        "compute_bytes": rep.compute_bytes, "total_bytes": rep.total_bytes}
            items = parts.plan.items
            planned = {"weights_bytes": sum(i.bytes for i in items if i.kind == LineKind.DRAFT_WEIGHTS),
                       "kv_bytes": sum(i.bytes for i in items if i.kind == LineKind.DRAFT_KV),
                       "compute_bytes": sum(i.bytes for i in items if i.kind in (LineKind.DRAFT_COMPUTE, LineKind.DRAFT_OUTPUT))}
            planned["total_bytes"] = sum(planned.values())
        finally:
            parts.close()
    for key in ("weights_bytes", "kv_bytes", "compute_bytes", "total_bytes"):
        assert abs(measured[key] - planned[key]) <= 0.05 * measured[key], (key, measured, planned)


def test_a_prompt_cut_where_the_window_dropped_entries_drafts_without_failing(head_file, target, tok):
    """A windowed head drops the entries its window passed; a reused prompt cut inside that gap
    (the same conversation sent again from an earlier turn) leaves the entry before the new seed
    missing. The seed still decodes (under the empty write id, then copied), and the head drafts
    from the entries it holds."""
    ids = tok.encode(TEXTS[1] * 2)
    net = _net(head_file, target, window=6)
    d = _drafter(net, target, window=6)
    fwd, root = _prefill(target, ids)
    d.begin(ids, fwd)
    d.propose(root, ids)  # the catch-up drops the entries between the sinks and the window
    keep = d.sinks + 4
    assert len(ids) - 6 > keep + 1  # the cut lies inside the dropped entries
    assert d.trim(keep) == keep
    target.trim(keep)
    again = target.prefill(ids[keep:keep + 1])
    d.begin(ids[:keep + 1], again, kept=keep)
    tree = d.propose(int(np.argmax(again.logits[-1])), ids[:keep + 1])
    assert tree.size > 1
    net.close()


def test_the_encoder_refuses_rows_of_another_width(head_file, target):
    """llama.cpp copies a batch's input rows without checking their width: rows that are not the
    target's three feature layers are refused before they reach it."""
    net = _net(head_file, target)
    width = 3 * net.info.target_hidden
    assert net.encode(np.zeros((2, width), np.float32)).shape == (2, net.n_embd)
    with pytest.raises(HomespecError, match=f"rows of {width} floats, got {width - 1}"):
        net.encode(np.zeros((2, width - 1), np.float32))
    net.close()


def test_a_seed_shares_its_call_with_the_entries_before_it(head_file, target, tok):
    """The committed entries a step writes and the seed after them go to llama.cpp in one call whose only
    output row is the seed's (with the device's top-k the context has embeddings on, which made llama.cpp
    turn every row into an output; homespec's patch leaves them to the rows asked for): the seed drafts
    what it drafts after the entries were written in a call of their own."""
    net = _net(head_file, target, lanes=2)
    if not net.device_topk:
        net.close()
        pytest.skip("this llama.cpp lacks homespec's patch: embeddings stay off")
    ids = tok.encode(TEXTS[1])
    fwd, root = _prefill(target, ids)
    g, tokens = net.encode(fwd.features), [*ids[1:], root]
    one = net.seed(0, tokens, g, 0, 4)
    ll, last = net._ll, len(tokens) - 1
    assert not ll.llama_get_embeddings_ith(net._ctx, 0) and ll.llama_get_embeddings_ith(net._ctx, last)
    net.write(1, tokens[:-1], g[:-1], 0)
    two = net.seed(1, tokens[-1:], g[-1:], last, 4)
    assert one.ids.tolist() == two.ids.tolist()
    assert np.allclose(one.logp, two.logp, atol=1e-4) and np.allclose(one.hidden, two.hidden, atol=1e-4)
    net.close()


@pytest.mark.parametrize("n", [1, 2, 4, 5])
def test_a_windowed_head_drafts_from_a_prompt_no_longer_than_its_sinks(head_file, target, tok, n):
    """A prompt of n tokens with a windowed head (4 sinks): the seed sits among the sinks, where every entry is
    seen, and the head drafts what a head seeing everything drafts (the seed is its own entry, not the one
    before it)."""
    ids = tok.encode(TEXTS[3])[:n]
    fwd, root = _prefill(target, ids)
    net = _net(head_file, target, lanes=2)
    windowed, full = _drafter(net, target, window=8), _drafter(net, target, window=0)
    assert windowed.sinks == 4 and full.window is None
    windowed.begin(ids, fwd)
    full.begin(ids, fwd)
    a, b = windowed.propose(root, ids), full.propose(root, ids)
    assert a.tokens[0] == root and a.tokens.tolist() == b.tokens.tolist() and a.parents.tolist() == b.parents.tolist()
    net.close()
