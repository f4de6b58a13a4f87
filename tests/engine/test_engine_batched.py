"""homespec.engine on the real SmolLM2 with 8 lanes: batched answers equal answers sent alone, with and
without speculation, and the engine's bookkeeping (cancel, queue, context, joining, chunked prefill).
Prompt reuse is off here (each answer from an empty cache, as "alone" means); tests/engine/test_engine_reuse.py
tests it.

What "equal" means: the token ids of each answer, batched against the same request sent alone.
The engine's llama.cpp context runs one KV stream per sequence (a chain draft), so a sequence's
cells stay in position order whoever shares the batch; what may still differ is the flash-
attention kernel: a micro-batch of 64 or more rows (eight prompts prefilled together) takes the
tiled kernel, which rounds differently from the one a lone 24-48 token prompt takes (docs/backends.md,
"Batch-vs-single noise floor", "the 64-row limit": max logit difference 1.51). So an answer may
differ from its answer alone only from a position where the target, scored alone, has its top
two logits within NEAR_TIE; the count of identical answers is asserted too (and printed).
With `ubatch=BATCH_INVARIANT_UBATCH` every answer is identical (test_batch_invariant_ubatch...).
"""

from __future__ import annotations

import queue

import numpy as np
import pytest

from homespec.engine.api import EngineClosed, EngineRequest, QueueFull
from homespec.errors import HomespecError
from homespec.engine.options import RunOptions
from homespec.engine.responses import Finish, StepFigures, TextDelta, final

MAX_TOKENS = 16
NEAR_TIE = 1.6  # logits: the tiled kernel's largest logit difference (1.51, docs/backends.md) and a margin
CHAIN = dict(ctx=384, threads=1, draft_depth=4, draft_topk=1, draft_tokens=5, guard=False)


def _open(method: str, **kw):
    from homespec.engine.core import Engine

    return Engine.open(RunOptions(method=method, **CHAIN), parallel=8, queue_size=2, cache_prompt=False, **kw).start()


@pytest.fixture(scope="module")
def eagle():
    """EAGLE-3.1 chains of 4, forced on (no guard); speculate=False requests decode plainly."""
    eng = _open("eagle3")
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def prompts(eagle):
    from homespec.promptsets import load_prompts
    from homespec.session.encode import encode_prompt

    ids = [encode_prompt(eagle.tokenizer, p.turns, True) for p in load_prompts("test")]
    return [tuple(p) for p in ids if 24 <= len(p) <= 48][:8]


def _req(p, speculate=False, n=MAX_TOKENS, **kw) -> EngineRequest:
    return EngineRequest(prompt_ids=tuple(p), max_tokens=n, speculate=speculate, **kw)


@pytest.fixture(scope="module")
def alone(eagle, prompts):
    """Plain greedy answers, each sent alone."""
    return [final(eagle.submit(_req(p))).token_ids for p in prompts]


def _together(eng, prompts, speculate):
    handles = [eng.submit(_req(p, speculate)) for p in prompts]
    return [final(h) for h in handles]


def _check_within_floor(prompts, reference, answers, smollm2_path) -> int:
    """-> answers identical to the reference; any other must part from it at a near-tie."""
    same = sum(a == r for a, r in zip(answers, reference))
    print(f"identical answers: {same} of {len(answers)}")
    if same == len(answers):
        return same
    from homespec.backends.llamacpp.backend import LlamaCppBackend
    from homespec.backends.settings import BackendSettings

    with LlamaCppBackend(smollm2_path, BackendSettings(n_ctx=384, n_ubatch=32, n_threads=1)) as b:
        for p, r, a in zip(prompts, reference, answers):
            if a == r:
                continue
            k = next(i for i, (x, y) in enumerate(zip(a, r)) if x != y)
            logits = b.score(list(p) + list(r[:k]))[-1]
            top2 = np.sort(logits)[::-1][:2]
            assert float(top2[0] - top2[1]) < NEAR_TIE, f"answers part at token {k}, not a near-tie"
    return same


def test_eight_concurrent_greedy_answers_equal_answers_alone(eagle, prompts, alone, smollm2_path):
    answers = _together(eagle, prompts, speculate=False)
    assert all(a.finish in ("eos", "length") for a in answers)
    assert _check_within_floor(prompts, alone, [a.token_ids for a in answers], smollm2_path) >= 6
    assert eagle.stats().live_sequences == 0


def test_batch_invariant_ubatch_makes_every_answer_identical(prompts, alone):
    from homespec.engine.assemble import BATCH_INVARIANT_UBATCH

    eng = _open("none", ubatch=BATCH_INVARIANT_UBATCH)
    try:
        answers = _together(eng, prompts, speculate=False)
    finally:
        eng.close()
    assert [a.token_ids for a in answers] == alone


def test_eagle3_speculation_forced_on_equals_plain_greedy(eagle, prompts, alone, smollm2_path):
    before = eagle.stats()
    answers = _together(eagle, prompts, speculate=True)
    assert _check_within_floor(prompts, alone, [a.token_ids for a in answers], smollm2_path) >= 6
    after = eagle.stats()
    assert after.spec_num_drafts > before.spec_num_drafts
    assert after.spec_num_draft_tokens - before.spec_num_draft_tokens >= after.spec_num_drafts - before.spec_num_drafts
    assert sum(after.spec_accepted_per_pos) == after.spec_num_accepted_tokens
    spec = [s for a in answers for s in a.steps[1:] if s.speculative]
    assert spec and all(s.draft_size <= 4 for s in spec)


def test_ngram_speculation_forced_on_equals_plain_greedy(prompts, alone, smollm2_path):
    eng = _open("ngram")
    try:
        answers = _together(eng, prompts, speculate=True)
        assert eng.stats().spec_num_drafts > 0
        # close() with a request running: it is cancelled past the bound, and no request is taken after
        h = eng.submit(_req(prompts[0], n=300))
        assert isinstance(h.get(), StepFigures)
        eng.close(timeout_s=0.0)
        assert final(h).finish == "cancelled"
        with pytest.raises(EngineClosed):
            eng.submit(_req(prompts[0]))
    finally:
        eng.close()
    assert _check_within_floor(prompts, alone, [a.token_ids for a in answers], smollm2_path) >= 6


def test_cancel_mid_stream_frees_the_sequence(eagle, prompts, alone):
    h = eagle.submit(_req(prompts[0], n=200))
    deltas = 0
    for r in h:
        deltas += isinstance(r, TextDelta)
        if deltas == 3:
            h.cancel()
        if isinstance(r, Finish):
            assert r.finish == "cancelled"
    assert eagle.stats().live_sequences == 0
    assert final(eagle.submit(_req(prompts[1]))).token_ids == alone[1]


def test_full_queue_raises_queue_full(eagle, prompts):
    running = [eagle.submit(_req(p, n=300)) for p in (prompts * 2)[:10]]  # 8 slots + 2 waiting
    try:
        with pytest.raises(QueueFull) as e:
            eagle.submit(_req(prompts[0]))
        assert e.value.retry_after_s >= 1 and e.value.hint
    finally:
        for h in running:
            h.cancel()
    assert {final(h).finish for h in running} <= {"cancelled", "eos"}
    assert eagle.stats().live_sequences == 0


def test_prompt_longer_than_the_context_is_refused_before_a_slot(eagle):
    before = eagle.stats().requests_total
    with pytest.raises(HomespecError) as e:
        eagle.submit(EngineRequest(prompt_ids=(1,) * eagle.lane_ctx, max_tokens=4))
    assert "context" in str(e.value) and e.value.hint
    assert eagle.stats().requests_total == before


def test_requests_join_running_ones_and_long_prompts_prefill_in_chunks(eagle, prompts, alone):
    """A streams; a 200-token prompt B joins and prefills in chunks of 32 while A keeps getting a
    token every step; C joins later. Every answer equals its answer alone."""
    eagle.prefill_chunk = 32
    try:
        _join_and_chunk(eagle, prompts, alone)
    finally:
        eagle.prefill_chunk = eagle.target.batch_rows


def _join_and_chunk(eagle, prompts, alone):
    long_prompt = tuple(list(prompts[2]) * 6)[:200]
    long_alone = final(eagle.submit(_req(long_prompt))).token_ids
    a = eagle.submit(_req(prompts[0], n=40))
    assert isinstance(a.get(), StepFigures)  # A's first token: A is decoding
    b = eagle.submit(_req(long_prompt))
    first_b = b.get()
    assert isinstance(first_b, StepFigures) and first_b.prefill
    a_steps = _drain_steps(a)  # A's steps put while B prefilled (the engine puts them first)
    assert a_steps >= 200 // 32 - 1
    c = eagle.submit(_req(prompts[3]))
    ra, rb, rc = final(a), final(b), final(c)
    assert rb.token_ids == long_alone and rc.token_ids == alone[3]
    assert rb.token_ids[0] == first_b.step.tokens[0]
    assert ra.token_ids[:len(alone[0])] == alone[0]


def _drain_steps(h) -> int:
    n = 0
    while True:
        try:
            r = h.get(timeout=0)
        except queue.Empty:
            return n
        if r is None:
            return n
        n += isinstance(r, StepFigures)


def test_sampled_answers_follow_their_own_seed_in_a_batch(eagle, prompts):
    """Temperature / top-p with a per-request seed: the same tokens alone and beside others."""
    from homespec.speculative.sampling import Sampler

    s = Sampler(temperature=0.8, top_p=0.9)
    reqs = [_req(p, sampler=s, seed=i) for i, p in enumerate(prompts[:3])]
    alone_ids = [final(eagle.submit(r)).token_ids for r in reqs]
    together = [final(h).token_ids for h in [eagle.submit(r) for r in reqs]]
    assert together == alone_ids


def test_eagle3_trees_share_one_cache_and_equal_plain_greedy(prompts, alone, smollm2_path):
    """Top-2 trees: each sequence's paths take its own range of sequence ids in a unified cache;
    accepted paths through a later child are committed by moving cells between those ids."""
    from homespec.engine.core import Engine

    opt = RunOptions(method="eagle3", **{**CHAIN, "draft_depth": 3, "draft_topk": 2, "draft_tokens": 6})
    eng = Engine.open(opt, parallel=4, queue_size=0, cache_prompt=False).start()
    try:
        assert eng.target.unified and eng.target.leaves_per_lane == 5
        answers = _together(eng, prompts[:4], speculate=True)
        assert max(s.draft_size for a in answers for s in a.steps) == 5
        assert eng.stats().live_sequences == 0
    finally:
        eng.close()
    assert _check_within_floor(prompts[:4], alone[:4], [a.token_ids for a in answers], smollm2_path) >= 3


def test_the_engine_opens_the_plan_that_plan_parallel_prints(capsys, eagle, smollm2_path):
    """One budget: the engine's plan for 8 slots is `homespec plan --parallel 8` with the same options, KV for
    every sequence included; and serve's default slots for the embedded model are the planned 4."""
    import json

    from homespec.cli import main
    from homespec.engine.setup import default_parallel
    from homespec.plan.render import to_json

    assert main(["plan", "--json", "--ctx", "384", "--parallel", "8", "--draft-depth", "4", "--draft-topk", "1",
                 "--draft-tokens", "5"]) == 0
    printed = json.loads(capsys.readouterr().out)
    ran = to_json(eagle.parts.plan)
    assert ran["settings"] == printed["settings"] and ran["items"] == printed["items"]
    assert printed["settings"]["parallel"] == 8
    kv = next(i for i in printed["items"] if i["name"] == "target KV")
    assert "x 8 sequences" in kv["detail"]
    assert eagle.target.settings.n_ctx == 8 * 384  # llama.cpp holds all 8 sequences' cells
    assert default_parallel(RunOptions(method="eagle3", **CHAIN), str(smollm2_path)) == 4
    assert default_parallel(RunOptions(method="draft", **CHAIN), str(smollm2_path)) == 1  # served one at a time
