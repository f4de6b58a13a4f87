"""Constrained decoding under speculation (homespec/grammar/): a draft tree pruned to the grammar
with the mask after every kept node's path, the matcher back where it was; rejection sampling on
the masked logits draws from the constrained distribution; and on the real SmolLM2, greedy
speculative decoding under a schema emits exactly plain constrained decoding's tokens, valid JSON."""

from __future__ import annotations

import json

import pytest
import numpy as np

from homespec.contracts.tree import DraftTree
from homespec.grammar import GrammarError, json_object, json_schema, vocabulary
from homespec.speculative.sampling import Sampler
from homespec.speculative.verify import verify_sampled

PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}


@pytest.fixture(scope="module")
def tok():
    from homespec.backends.tokenizer import load_tokenizer
    from homespec.embedded import smollm2_path

    return load_tokenizer(str(smollm2_path()))


@pytest.fixture(scope="module")
def vocab(tok):
    return vocabulary(tok)


def _one(tok, text: str) -> int:
    ids = tok.encode(text, add_bos=False)
    assert len(ids) == 1, (text, ids)
    return ids[0]


def test_a_tree_is_pruned_to_the_grammar_with_each_nodes_mask(tok, vocab):
    guide = json_schema(PERSON, vocab).start()
    guide.advance([_one(tok, '{"')])
    name, nope, colon, age = (_one(tok, t) for t in ("name", "xyz", '":', "age"))
    # root -> name -> ":      (allowed: a key of the schema, then its colon)
    #      -> xyz -> ":      (xyz begins no key of the schema: dropped, with its child)
    #      -> age            (kept exactly when the grammar allows it first: llguidance keeps the schema's order)
    tree = DraftTree.of([0, name, nope, colon, colon, age], [-1, 0, 0, 1, 2, 0])
    before = guide.mask()
    kept, masks = guide.prune(tree)
    allowed_age = bool(before[age])
    assert kept.tokens.tolist() == [0, name, colon] + ([age] if allowed_age else [])
    assert kept.parents.tolist() == [-1, 0, 1] + ([0] if allowed_age else [])
    assert np.array_equal(guide.mask(), before)  # rolled back to the committed state
    assert np.array_equal(masks[0], before)
    guide.advance([name])
    assert np.array_equal(masks[1], guide.mask())  # row i: the mask after root..i
    guide.advance([colon])
    assert np.array_equal(masks[2], guide.mask())


def test_a_draft_past_the_grammars_end_keeps_the_end_and_the_committed_state(tok, vocab):
    """A lookup copying an earlier answer's end drafts `}` and then end-of-generation tokens: the
    grammar ends at `}` (the matcher stops), so the tree keeps `}` and nothing after it, the row
    after `}` allows only the end of generation, and the matcher is back at the committed state. A
    stopped matcher takes no token and rolls back none it did not take: counting the ones after the
    end in the rollback ate into the committed tokens, and a later step broke the grammar."""
    guide = json_object(vocab).start()
    committed = tok.encode('{"a": 1', add_bos=False)  # the pending root included
    guide.advance(committed)
    before = guide.mask()
    close, eos = _one(tok, "}"), min(tok.eos_ids)
    tree = DraftTree.of([committed[-1], close, eos, eos, eos], [-1, 0, 1, 2, 3])
    kept, masks = guide.prune(tree)
    assert kept.tokens.tolist() == [committed[-1], close] and len(masks) == 2
    assert set(np.flatnonzero(masks[1])) == set(tok.eos_ids)
    assert np.array_equal(guide.mask(), before)  # back at the committed state
    guide.advance([close, eos])
    assert guide.done and not guide.matcher.is_error()


@pytest.mark.slow
def test_masked_rejection_sampling_draws_from_the_constrained_distribution(tok, vocab):
    """Contract 2 with the grammar's distribution as the target's: the first emitted token's
    frequencies match softmax(masked logits / T) whatever the draft offered (forbidden children
    included, before pruning)."""
    guide = json_schema({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}, vocab).start()
    guide.advance(tok.encode('{"a": ', add_bos=False))
    gen = np.random.default_rng(0)
    width = 1024  # the first ids hold the digits and "x": a narrow vocabulary keeps the draws quick
    logits = (gen.standard_normal((3, width)) * 3).astype(np.float32)
    digits = [_one(tok, d) for d in "0123456789"]
    logits[0, digits] += 8.0  # the allowed tokens carry the mass, several of them
    children = [digits[3], _one(tok, "x")]  # one allowed child, one the grammar forbids
    tree = DraftTree.of([0, *children], [-1, 0, 0], [1.0, 0.5, 0.5])
    mask = guide.mask()
    masked = guide.constrain(logits, np.stack([mask] * 3))
    sampler = Sampler(temperature=0.8)
    want = sampler.probs(masked[0])
    n = 1500
    counts = np.zeros(width)
    for _ in range(n):
        v = verify_sampled(tree, masked, sampler, gen)
        first = int(tree.tokens[v.path[1]]) if len(v.path) > 1 else v.next_token
        counts[first] += 1
    assert bool(mask[np.flatnonzero(counts)].all()) and counts[children[1]] == 0  # never outside it
    top = np.argsort(-want, kind="stable")[:5]
    for t in top.tolist():
        p = float(want[t])
        assert abs(counts[t] / n - p) < 4 * (p * (1 - p) / n) ** 0.5 + 1e-3, (t, counts[t] / n, p)


def test_a_schema_that_does_not_compile_is_refused(vocab):
    with pytest.raises(GrammarError):
        json_schema({"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}}, vocab)
    with pytest.raises(GrammarError):
        json_schema(["not", "a", "schema"], vocab)
    assert json_object(vocab).start().mask().any()


@pytest.mark.slow
def test_greedy_speculation_under_a_schema_is_plain_constrained_decoding():
    """Same prompt, same schema: plain decoding and the EAGLE head's tree drafting on every step
    (no guard): the same tokens, valid under the schema, and drafts did get accepted (the grammar
    did not simply switch speculation off)."""
    from homespec.cli.options import RunArgs
    from homespec.engine.api import EngineRequest
    from homespec.engine.core import Engine, follow
    from homespec.engine.responses import final
    from homespec.session.encode import encode_prompt

    answers = {}
    for method in ("none", "eagle3"):
        engine = Engine.open(RunArgs(method=method, ctx=1024, threads=2).options())
        try:
            grammar = json_schema(PERSON, vocabulary(engine.tokenizer))
            ids = encode_prompt(engine.tokenizer, ["Describe Alice, who is 30, as a JSON object."], chat=True)
            answers[method] = final(follow(engine, engine.submit(EngineRequest(tuple(ids), 64, grammar=grammar))))
        finally:
            engine.close()
    plain = answers["none"]
    assert plain.finish == "eos" and set(json.loads(plain.text)) == {"name", "age"}
    assert answers["eagle3"].token_ids == plain.token_ids
    assert sum(s.accepted for s in answers["eagle3"].steps) > 0
