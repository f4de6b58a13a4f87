"""Drafters against a real (tiny, random-weight) target on homespec's torch backend."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from homespec.contracts.tree import DraftTree, check_parents, depths
from homespec.errors import HomespecError
from homespec.nets.eagle3 import Eagle3Config, Eagle3Head, HeadCache
from homespec.speculative.drafters.draft_model import DraftModelDrafter
from homespec.speculative.drafters.eagle3_torch import Eagle3Drafter
from homespec.speculative.verify import verify_greedy

# Building and loading the tiny target takes ~10 s (its GGUF carries SmolLM2's 49k-token vocabulary).
pytestmark = pytest.mark.slow

N_LAYER = 6
PROMPT = [1, 510, 2204, 314, 260, 3170, 28, 510, 2204, 314]


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    from tiny_models import make_tiny_gguf

    return make_tiny_gguf(tmp_path_factory.mktemp("tiny") / "tiny.gguf", n_layer=N_LAYER, seed=0)


@pytest.fixture(scope="module")
def target(tiny_gguf):
    from homespec.backends.torch.backend import TorchBackend

    return TorchBackend.load(str(tiny_gguf), max_context=256)


@pytest.fixture(scope="module")
def second(tiny_gguf):
    from homespec.backends.torch.backend import TorchBackend

    return TorchBackend.load(str(tiny_gguf), max_context=256)


def _head(target, *, draft_vocab=2048, seed=0, **kw) -> Eagle3Head:
    config = Eagle3Config(
        hidden_size=target.hidden_size, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        intermediate_size=128, vocab_size=target.n_vocab, draft_vocab_size=draft_vocab,
        target_hidden_size=target.hidden_size, aux_layer_ids=(1, 3, 5), **kw,
    )
    torch.manual_seed(seed)
    head = Eagle3Head(config)
    ids = torch.randperm(target.n_vocab, generator=torch.Generator().manual_seed(seed))[:draft_vocab].sort().values
    head.d2t.copy_(ids - torch.arange(draft_vocab))
    head.t2d.zero_()
    head.t2d[ids] = True
    return head.eval()


def _plain_greedy(backend, prompt, n):
    backend.reset()
    logits = backend.prefill(prompt).logits[-1]
    out = []
    for _ in range(n):
        tok = int(logits.argmax())
        out.append(tok)
        logits = backend.verify([tok], [-1]).logits[0]
        backend.commit([0])
    backend.reset()
    return out


def _speculate(backend, drafter, prompt, n):
    """A minimal greedy speculative loop (the real one is homespec.engine.step)."""
    backend.reset()
    fwd = backend.prefill(prompt)
    drafter.begin(prompt, fwd)
    context, root, out, accepted = list(prompt), int(fwd.logits[-1].argmax()), [], []
    while len(out) < n:
        tree = drafter.propose(root, context)
        check_parents(tree.parents)
        ver = backend.verify(tree.tokens.tolist(), tree.parents.tolist())
        verdict = verify_greedy(tree, ver.logits)
        backend.commit(verdict.path)
        path = list(verdict.path)
        tokens = tree.tokens[path].tolist()
        drafter.accept(tokens, None if ver.features is None else ver.features[path], verdict.next_token)
        context += tokens
        out += tokens[1:] + [verdict.next_token]
        accepted.append(verdict.accepted)
        root = verdict.next_token
    first = int(fwd.logits[-1].argmax())
    return [first] + out[: n - 1], accepted, context, root


def test_eagle3_tree_is_valid_and_output_lossless(target):
    head = _head(target)
    drafter = Eagle3Drafter(head, target, depth=3, topk=3, total=10)
    assert target.feature_layers == (1, 3, 5)
    expected = _plain_greedy(target, PROMPT, 12)
    out, accepted, context, _ = _speculate(target, drafter, PROMPT, 12)
    assert out == expected
    drafter.reset()
    _, root = _begun(drafter, target)
    tree = drafter.propose(root, PROMPT)
    parents = check_parents(tree.parents)
    assert 2 <= tree.size <= 10
    assert int(depths(parents).max()) <= 3
    assert bool(head.t2d[torch.from_numpy(tree.tokens[1:])].all())  # every draft token is a mapped draft-vocab id
    assert np.all((tree.probs > 0) & (tree.probs <= 1))
    assert drafter.cache.length == len(PROMPT)  # the tree's speculative KV is gone


def _begun(drafter, target, prompt=PROMPT):
    """The target prefilled with `prompt` from an empty cache and `drafter` begun on it -> (forward,
    the target's greedy next token: the first root)."""
    target.reset()
    fwd = target.prefill(prompt)
    drafter.begin(prompt, fwd)
    return fwd, int(fwd.logits[-1].argmax())


def _scratch_kv(head, backend, committed, root):
    """The head's KV computed from scratch: the target prefills the whole committed sequence."""
    backend.reset()
    feats = backend.prefill(committed).features  # [L, 3H]
    backend.reset()
    cache: HeadCache = head.new_cache(len(committed) + 1)
    n = len(committed)
    tokens = torch.tensor(committed[1:] + [root])
    attend = torch.arange(n)[None, :] <= torch.arange(n)[:, None]
    with torch.no_grad():
        head(backend.embed(tokens), head.project(torch.from_numpy(feats)), torch.arange(n), cache, attend)
    return cache


@pytest.mark.parametrize("flags", [{}, {"fc_norm": True, "norm_output": True}], ids=["eagle3", "eagle3.1"])
def test_eagle3_head_kv_after_accept_equals_recompute(target, flags):
    head = _head(target, seed=1, **flags)
    drafter = Eagle3Drafter(head, target, depth=4, topk=2, total=8)
    _, _, context, root = _speculate(target, drafter, PROMPT, 10)
    drafter.propose(root, context)  # accept() writes lazily: the committed entries land before drafting
    n = drafter.cache.length
    assert n == len(context)
    scratch = _scratch_kv(head, target, context, root)
    assert torch.allclose(drafter.cache.k[:n], scratch.k[:n], atol=1e-4)
    assert torch.allclose(drafter.cache.v[:n], scratch.v[:n], atol=1e-4)


def test_eagle3_chain_and_checks(target):
    head = _head(target, seed=2)
    drafter = Eagle3Drafter(head, target, depth=4, topk=1, total=5)
    _, root = _begun(drafter, target)
    tree = drafter.propose(root, PROMPT)
    assert tree.parents.tolist() == [-1, 0, 1, 2, 3]
    with pytest.raises(HomespecError, match="out of step"):
        drafter.propose(root, PROMPT + [7])
    with pytest.raises(HomespecError, match="features"):
        drafter.accept([root], None, 5)
    target.reset()


def test_eagle3_plain_steps_keep_the_head_in_step(target):
    """Plain decoding steps (a root-only tree, e.g. when speculation is paused) still resync."""
    head = _head(target, seed=6)
    drafter = Eagle3Drafter(head, target, depth=3, topk=2, total=6)
    _, root = _begun(drafter, target)
    context = list(PROMPT)
    for speculate in (False, False, True, False, True):
        tokens, parents = ([root], [-1])
        if speculate:
            tree = drafter.propose(root, context)
            tokens, parents = tree.tokens.tolist(), tree.parents.tolist()
        ver = target.verify(tokens, parents)
        verdict = verify_greedy(DraftTree.of(tokens, parents), ver.logits)
        target.commit(verdict.path)
        path = list(verdict.path)
        drafter.accept([tokens[i] for i in path], ver.features[path], verdict.next_token)
        context += [tokens[i] for i in path]
        root = verdict.next_token
    drafter.propose(root, context)  # accept() writes lazily: the committed entries land before drafting
    n = drafter.cache.length
    assert n == len(context)
    scratch = _scratch_kv(head, target, context, root)
    assert torch.allclose(drafter.cache.k[:n], scratch.k[:n], atol=1e-4)


@pytest.mark.parametrize("plain_steps", [0, 3], ids=["drafted", "plain-since-last-draft"])
def test_eagle3_trim_then_begin_kept_builds_the_state_a_fresh_prefill_builds(target, plain_steps):
    """A lane's next prompt shares a prefix with its last context: the drafter keeps the head's
    entries for it (pending ones written first) and takes features for the rest only; its KV and
    its next draft equal those of a drafter that prefilled the new prompt from scratch."""
    head = _head(target, seed=4)
    kept_drafter = Eagle3Drafter(head, target, depth=3, topk=2, total=6)
    _, _, context, root = _speculate(target, kept_drafter, PROMPT, 8)
    for _ in range(plain_steps):  # plain steps: their entries stay pending until trim writes them
        ver = target.verify([root], [-1])
        target.commit([0])
        nxt = int(ver.logits[0].argmax())
        kept_drafter.accept([root], ver.features[[0]], nxt)
        context, root = context + [root], nxt
    new_prompt = context[:-2] + [17, 42, 99]
    keep = len(context) - 3  # the shared prefix less the token the target decodes again
    assert kept_drafter.trim(keep) == keep and kept_drafter.cache.length == keep
    target.rollback(target.n_past - keep)
    fwd = target.prefill(new_prompt[keep:])
    kept_drafter.begin(new_prompt, fwd, kept=keep)
    root2 = int(fwd.logits[-1].argmax())
    tree = kept_drafter.propose(root2, new_prompt)

    fresh = Eagle3Drafter(head, target, depth=3, topk=2, total=6)
    target.reset()
    fwd_full = target.prefill(new_prompt)
    fresh.begin(new_prompt, fwd_full)
    fresh_tree = fresh.propose(int(fwd_full.logits[-1].argmax()), new_prompt)
    n = len(new_prompt)
    assert torch.allclose(kept_drafter.cache.k[:n], fresh.cache.k[:n], atol=1e-4)
    assert torch.allclose(kept_drafter.cache.v[:n], fresh.cache.v[:n], atol=1e-4)
    assert tree.tokens.tolist() == fresh_tree.tokens.tolist()
    assert kept_drafter.trim(10**6) <= len(new_prompt)  # never more than it holds
    target.reset()


def test_eagle3_rejects_wrong_target(target):
    config = Eagle3Config(
        hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8, intermediate_size=64,
        vocab_size=target.n_vocab, draft_vocab_size=100, target_hidden_size=48,
    )
    with pytest.raises(HomespecError, match="48"):
        Eagle3Drafter(Eagle3Head(config), target)


def test_eagle3_limits_keep_the_deepest_shape_inside_the_head_cache(target):
    """The guard deepens a drafter only through set_shape() within limits(): an EAGLE-3 drafter
    configured at depth 2 can be reshaped to at least the guard's MAX_DEPTH, and at that depth a
    proposal at the last position of the context still fits the head's KV cache; one level more
    is refused before it could overflow."""
    from homespec.contracts.drafter import MAX_DEPTH
    from homespec.errors import ContractError

    drafter = Eagle3Drafter(_head(target, seed=5), target, depth=2, topk=4, total=8)
    deepest = drafter.limits().max_depth
    assert deepest >= MAX_DEPTH
    assert drafter.set_shape(deepest, 4 * deepest) == drafter.shape
    assert (drafter.depth, drafter.total) == (deepest, 4 * deepest)  # what bench reports
    with pytest.raises(ContractError):
        drafter.set_shape(deepest + 1, 8)
    prompt = (PROMPT * 26)[: target.max_context - 1]  # the context is full but for the root
    _, root = _begun(drafter, target, prompt)
    tree = drafter.propose(root, prompt)
    assert tree.size == 4 * deepest and drafter.cache.length == len(prompt)  # all levels drafted, then dropped
    target.reset()


def test_every_drafter_declares_its_shape(target, second):
    """shape / limits / set_shape is what the guard reads and sets, for each drafter."""
    from homespec.contracts.drafter import DraftShape
    from homespec.speculative.drafters.ngram import NgramDrafter

    ngram = NgramDrafter(num_draft=6, candidates=2)
    assert ngram.shape == DraftShape(6, 2, 13)
    assert ngram.set_shape(3, 7) == DraftShape(3, 2, 7) and ngram.num_draft == 3  # the trie's size follows
    chain = DraftModelDrafter(second, depth=5)
    assert chain.shape == DraftShape(5, 1, 6)
    assert chain.set_shape(2, 9) == DraftShape(2, 1, 3)  # a chain's total is depth + 1
    tree = DraftModelDrafter(second, depth=3, topk=2, total=7)
    assert tree.set_shape(4, 9) == DraftShape(4, 2, 9)


def test_eagle3_window_limits_attention(target):
    head = _head(target, seed=3)
    full = Eagle3Drafter(head, target, depth=2, topk=2, total=5)
    fwd, root = _begun(full, target)
    full.propose(root, PROMPT)
    windowed = Eagle3Drafter(head, target, depth=2, topk=2, total=5, window=3, sinks=0)
    windowed.begin(PROMPT, fwd)
    windowed.propose(root, PROMPT)
    # the first three entries see no more than three slots either way; later ones differ
    assert torch.allclose(full.cache.k[:3], windowed.cache.k[:3])
    assert not torch.allclose(full._last.logp, windowed._last.logp)
    target.reset()


def test_draft_model_same_model_accepts_everything(target, second):
    drafter = DraftModelDrafter(second, depth=4)
    expected = _plain_greedy(target, PROMPT, 15)
    out, accepted, context, _ = _speculate(target, drafter, PROMPT, 15)
    assert out == expected
    assert all(a == 4 for a in accepted)  # the draft is the target: every draft token is right
    assert second.n_past + len(drafter._pending) == len(context)


@pytest.mark.parametrize("topk", [1, 2])
def test_draft_model_different_model_stays_lossless(target, second, topk):
    original = second.model.lm_head
    g = torch.Generator().manual_seed(4)
    second.model.lm_head = original + 0.8 * torch.randn(original.shape, generator=g)  # a worse draft model
    try:
        drafter = DraftModelDrafter(second, depth=3, topk=topk)
        expected = _plain_greedy(target, PROMPT, 10)
        out, accepted, context, _ = _speculate(target, drafter, PROMPT, 10)
        assert out == expected
        assert min(accepted) < 3  # some rejections happened
        assert second.n_past + len(drafter._pending) == len(context)
    finally:
        second.model.lm_head = original


def test_saved_head_loads_and_drafts_the_same_tree(target, tmp_path):
    from homespec.nets.eagle3 import load_head, save_head

    head = _head(target, seed=5, fc_norm=True)
    save_head(head, tmp_path / "head")
    loaded = load_head(tmp_path / "head", target.n_layer, target.hidden_size, target.n_vocab)
    trees = []
    for h in (head, loaded):
        drafter = Eagle3Drafter(h, target, depth=3, topk=2, total=6)
        target.reset()
        fwd = target.prefill(PROMPT)
        drafter.begin(PROMPT, fwd)
        trees.append(drafter.propose(int(fwd.logits[-1].argmax()), PROMPT))
    target.reset()
    assert np.array_equal(trees[0].tokens, trees[1].tokens)
    assert np.array_equal(trees[0].parents, trees[1].parents)


def test_eagle3_window_covering_the_context_drafts_the_same_tokens(target):
    """A window (plus sinks) that covers the whole context changes nothing: same trees, same output."""
    from homespec.engine.run import decode
    from homespec.speculative.steps import Limits

    head = _head(target, seed=5)
    outputs, trees = [], []
    for window in (None, 4096):
        drafter = Eagle3Drafter(head, target, depth=3, topk=2, total=7, window=window)
        target.reset()
        seen = []
        orig = drafter.propose

        def propose(root, context, orig=orig, seen=seen):
            tree = orig(root, context)
            seen.append(tree.tokens.tolist())
            return tree

        drafter.propose = propose
        steps = list(decode(target, drafter, PROMPT, limits=Limits(max_tokens=24, stop_at_eos=False)))
        outputs.append([t for s in steps for t in s.tokens])
        trees.append(seen)
    assert outputs[0] == outputs[1]
    assert trees[0] == trees[1]
    target.reset()


@pytest.mark.parametrize("window", [None, 5], ids=["full", "window"])
def test_eagle3_flush_writes_what_a_full_forward_writes(target, window):
    """Committed entries are written with their key/value projections only (in chunks) and just the
    last entry runs attention and the MLP: same cache and same first draft as one full forward."""
    head = _head(target, seed=4, fc_norm=True, norm_output=True)
    target.reset()
    fwd = target.prefill(PROMPT)
    root = int(fwd.logits[-1].argmax())
    n = len(PROMPT)
    # reference: every entry through the whole layer, causal (and windowed) mask
    ref = head.new_cache(64)
    slot = torch.arange(n)
    attend = slot[None, :] <= slot[:, None]
    if window is not None:
        attend &= (slot[None, :] > slot[:, None] - window) | (slot[None, :] < 4)
    with torch.no_grad():
        _, normed = head(target.embed(torch.tensor(PROMPT[1:] + [root])), head.project(torch.from_numpy(fwd.features)),
                         slot, ref, attend)
        ref_logp = head.log_probs(normed[-1:])
    for chunk in (1024, 3):
        drafter = Eagle3Drafter(head, target, depth=3, topk=2, total=7, window=window)
        drafter.flush_chunk = chunk
        drafter.begin(PROMPT, fwd)
        drafter.propose(root, PROMPT)
        assert drafter.cache.length == n
        assert torch.allclose(drafter.cache.k[:n], ref.k[:n], atol=1e-5)
        assert torch.allclose(drafter.cache.v[:n], ref.v[:n], atol=1e-5)
        assert torch.allclose(drafter._last.logp, ref_logp, atol=1e-5)
    target.reset()
