"""Prompt reuse on the real SmolLM2: a lane keeps its KV (and its drafter's state) after an answer,
and the next request prefills only what its prompt does not share with it.

"Equal" is as in tests/engine/test_engine_batched.py: the same token ids, or a parting at a near-tie of
the target's own logits (a reused prefix is decoded in other batches than a fresh prompt, and
llama.cpp's batched kernels round differently; docs/backends.md, "Batch-vs-single noise floor").
"""

from __future__ import annotations

import numpy as np
import pytest

from homespec.engine.api import EngineRequest
from homespec.engine.options import RunOptions
from homespec.engine.responses import Finish, StepFigures, final
from homespec.engine.reuse import Lane, choose_lane, common_prefix
from homespec.speculative.steps import Limits

NEAR_TIE = 1.6
ANSWER = 16
TURNS = ["Name three fruits.", "Which of them is the sweetest?", "Why?", "Give me a recipe with it.",
         "How long does it take?", "Thanks! Summarise our chat in one line."]


def test_a_request_takes_the_lane_where_it_costs_least():
    """Cost: prompt tokens to prefill there + cached tokens thrown away; ties: keep more, then LRU."""
    a, b, c = Lane(0, None, [1, 2, 3, 4], last_used=5.0), Lane(1, None, [1, 2, 9], last_used=1.0), Lane(2, None, [])
    assert choose_lane([a, b, c], [1, 2, 3, 4, 5, 6]) is a  # a conversation's next turn: its own lane
    assert choose_lane([a, b, c], [1, 2, 9, 9]) is b
    assert choose_lane([a, b, c], [8]) is c  # nothing shared anywhere: the empty lane
    conv = Lane(0, None, list(range(100)), last_used=1.0)
    empty = Lane(1, None, [], last_used=2.0)
    # a newcomer sharing a 10-token system prompt: the empty lane, not the conversation's
    assert choose_lane([conv, empty], list(range(10)) + [500, 501]) is empty
    assert choose_lane([conv], list(range(10)) + [500, 501]) is conv  # the only free lane
    assert common_prefix([1, 2, 3], [1, 2]) == 2 and common_prefix([], [1]) == 0


def _near_tie(b, prompt, ref, got) -> bool:
    k = next(i for i, (x, y) in enumerate(zip(got, ref)) if x != y)
    top2 = np.sort(b.score(list(prompt) + list(ref[:k]))[-1])[::-1][:2]
    return float(top2[0] - top2[1]) < NEAR_TIE


def _conversation(session, *, cache_prompt: bool, turns=TURNS, sampler=None, seed=0) -> list[Finish]:
    """A chat's turns: each prompt is the whole conversation so far, as a chat UI sends it."""
    from homespec.session.encode import encode_prompt

    tok = session.backend.tokenizer
    history: list[dict[str, str]] = []
    out = []
    for turn in turns:
        history.append({"role": "user", "content": turn})
        ids = encode_prompt(tok, history, True)
        fin = final(session.stream(ids, sampler=sampler, limits=Limits(max_tokens=ANSWER), seed=seed,
                                   cache_prompt=cache_prompt))
        out.append(fin)
        history.append({"role": "assistant", "content": fin.text})
    return out


@pytest.fixture(scope="module")
def chat_session():
    from homespec.session import Session

    s = Session.open(RunOptions(method="none", ctx=2048, threads=1))
    yield s
    s.close()


def test_a_six_turn_conversation_reuses_its_history_and_answers_the_same(chat_session, smollm2_path):
    fresh = _conversation(chat_session, cache_prompt=False)
    reused = _conversation(chat_session, cache_prompt=True)
    assert all(f.cached_tokens == 0 for f in fresh)
    for i, (f, r) in enumerate(zip(fresh, reused)):
        if i > 0:  # everything up to the last answer was in the lane
            assert r.cached_tokens >= len(reused[i - 1].prompt_token_ids), (i, r.cached_tokens)
            assert len(r.prompt_token_ids) - r.cached_tokens < 40  # only the new message is prefilled
        if r.token_ids != f.token_ids:
            from homespec.backends.llamacpp.backend import LlamaCppBackend
            from homespec.backends.settings import BackendSettings

            with LlamaCppBackend(smollm2_path, BackendSettings(n_ctx=2048, n_threads=1)) as b:
                assert _near_tie(b, r.prompt_token_ids, f.token_ids, r.token_ids), f"turn {i} parts off a near-tie"
            break  # after a parting the conversations differ: nothing more to compare
    assert chat_session.engine.stats().prompt_tokens_reused_total > 0


def test_sampled_answers_with_a_seed_are_reproducible_with_reuse(chat_session):
    """The same conversation, sampled with the same seed, twice with reuse: the same tokens (each turn
    reuses the same prefix, so its logits are computed the same way). Against a fresh cache the
    prompt's last token is decoded alone instead of inside the prompt's batch: the logits differ by
    the batch-vs-single noise floor, and a draw near a boundary may go the other way."""
    from homespec.speculative.sampling import Sampler

    s = Sampler(temperature=0.9, top_p=0.95)
    _conversation(chat_session, cache_prompt=True, turns=TURNS[3:5])  # some other conversation in the lane
    reused = _conversation(chat_session, cache_prompt=True, turns=TURNS[:3], sampler=s, seed=7)
    _conversation(chat_session, cache_prompt=True, turns=TURNS[3:5])
    again = _conversation(chat_session, cache_prompt=True, turns=TURNS[:3], sampler=s, seed=7)
    assert [r.token_ids for r in reused] == [a.token_ids for a in again]
    assert [r.cached_tokens for r in reused] == [a.cached_tokens for a in again] and reused[-1].cached_tokens > 0


def test_an_edited_earlier_message_keeps_only_the_shared_prefix(chat_session):
    from homespec.session.encode import encode_prompt

    tok = chat_session.backend.tokenizer
    first = [{"role": "user", "content": "Tell me about the moon."}]
    a = final(chat_session.stream(encode_prompt(tok, first, True), limits=Limits(max_tokens=ANSWER)))
    edited = [{"role": "user", "content": "Tell me about the sun."}]
    ids = encode_prompt(tok, edited, True)
    b = final(chat_session.stream(ids, limits=Limits(max_tokens=ANSWER)))
    shared = common_prefix(a.prompt_token_ids, ids)
    assert b.cached_tokens == shared - 1  # the shared prefix, less the token decoded again
    c = final(chat_session.stream(ids, limits=Limits(max_tokens=ANSWER), cache_prompt=False))
    if b.token_ids != c.token_ids:
        assert _near_tie(chat_session.backend, ids, c.token_ids, b.token_ids)


def test_drafting_after_reuse_accepts_as_much_as_on_a_fresh_cache(smollm2_path):
    """EAGLE-3 forced on: the head's state kept for the reused prefix is the state a fresh prefill
    builds (contract 3), so the drafts, and what they accept, are the same."""
    from homespec.session import Session

    s = Session.open(RunOptions(method="eagle3", ctx=2048, threads=1, draft_depth=4, draft_topk=1, draft_tokens=5,
                                guard=False))
    try:
        fresh = _conversation(s, cache_prompt=False, turns=TURNS[:3])
        reused = _conversation(s, cache_prompt=True, turns=TURNS[:3])
    finally:
        s.close()
    for f, r in zip(fresh[1:], reused[1:]):
        if f.token_ids != r.token_ids:
            break
        assert r.cached_tokens > 0
        assert abs(r.mean_accepted - f.mean_accepted) <= 0.25, (f.mean_accepted, r.mean_accepted)


def test_two_clients_on_two_lanes_each_find_their_own_history(smollm2_path):
    """Interleaved conversations: each turn goes to the lane holding its own history."""
    from homespec.engine.core import Engine
    from homespec.session.encode import encode_prompt

    eng = Engine.open(RunOptions(method="none", ctx=1024, threads=1), parallel=2, queue_size=2).start()
    try:
        tok = eng.tokenizer
        hist = {"a": [{"role": "user", "content": "Describe a cat."}],
                "b": [{"role": "user", "content": "List four prime numbers and nothing else, please."}]}
        for rnd in range(3):
            for who in ("a", "b"):
                ids = tuple(encode_prompt(tok, hist[who], True))
                fin = final(eng.submit(EngineRequest(ids, ANSWER)))
                if rnd > 0:
                    assert len(ids) - fin.cached_tokens < 20, (who, rnd, len(ids), fin.cached_tokens)
                hist[who] += [{"role": "assistant", "content": fin.text}, {"role": "user", "content": "More."}]
        s = eng.stats()
        assert s.live_sequences == 0 and s.cached_tokens > 0
        assert s.prompt_tokens_reused_total + s.prompt_tokens_prefilled_total == s.prompt_tokens_total
        assert all(not slot["is_processing"] and slot["n_cached"] > 0 for slot in eng.slots_info())
    finally:
        eng.close()


def test_no_lane_leaks_after_cancels_mid_prefill_and_mid_answer(smollm2_path):
    from homespec.engine.core import Engine

    eng = Engine.open(RunOptions(method="ngram", ctx=1024, threads=1), parallel=2, queue_size=4,
                      prefill_chunk=16).start()
    try:
        tok = eng.tokenizer
        long = tuple(tok.encode("A long document about rivers and their deltas. " * 20, add_bos=True))
        h = eng.submit(EngineRequest(long, 64))
        h.cancel()  # in the queue, or mid-prefill: either way it ends cancelled
        assert final(h).finish == "cancelled"
        h2 = eng.submit(EngineRequest(long, 200))
        for r in h2:
            if isinstance(r, StepFigures) and not r.prefill:
                h2.cancel()  # mid-answer
        assert isinstance(r, Finish) and r.finish == "cancelled" and 0 < len(r.token_ids) < 200
        after = final(eng.submit(EngineRequest(long, 8)))
        assert after.finish == "length" and after.cached_tokens > 0  # the cancelled answer's prompt was kept
        s = eng.stats()
        assert s.live_sequences == 0 and s.active == 0
        assert all(not slot["is_processing"] for slot in eng.slots_info())
    finally:
        eng.close()
