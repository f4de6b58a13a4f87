"""Prompt reuse where llama.cpp cannot cut the memory anywhere, and conversations kept in host RAM.

* A hybrid model (tiny random-weight Qwen3-Next: recurrent layers beside attention) cannot cut its
  recurrent state back: the lane resumes from the checkpoint taken right after the last prompt was
  prefilled, and the answer equals the one from an empty cache.
* A sliding-window model (tiny Gemma 3, window 32) keeps the window alone: a cut inside what the cache
  still holds works; the answers equal those from an empty cache.
* `--cache-ram`: a conversation overwritten in the only lane comes back from host RAM.
Greedy on random weights: the tokens mean nothing, but they are exact, so "equal" is token for token.
"""

from __future__ import annotations

import pytest

from homespec.engine.api import EngineRequest
from homespec.engine.options import RunOptions
from homespec.engine.responses import final
from homespec.speculative.steps import Limits

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def family_gguf(tmp_path_factory):
    from tiny_families import make_family_gguf

    root = tmp_path_factory.mktemp("families")
    return {"qwen3next": make_family_gguf(root / "qwen3next.gguf", "qwen3next"),
            "gemma3": make_family_gguf(root / "gemma3.gguf", "gemma3", sliding_window=32),
            # a near-function of its last token (tiny_families.py): its answers cycle, and lookups find them
            "qwen3next-pred": make_family_gguf(root / "qwen3next-pred.gguf", "qwen3next", predictable=True)}


def _turns(session, prompt: list[int], extra: list[int]) -> tuple:
    """A turn, then the next (its prompt: the first, its answer, new tokens) with and without reuse."""
    lim = Limits(max_tokens=12, stop_at_eos=False)
    first = final(session.stream(prompt, limits=lim))
    nxt = prompt + list(first.token_ids[:-1]) + extra
    reused = final(session.stream(nxt, limits=lim))
    fresh = final(session.stream(nxt, limits=lim, cache_prompt=False))
    return first, reused, fresh


def test_a_hybrid_model_resumes_from_the_checkpoint_after_its_prompt(family_gguf):
    from homespec.session import Session

    s = Session.open(RunOptions(model=str(family_gguf["qwen3next"]), method="none", ctx=512, threads=1))
    try:
        assert s.backend.recurrent
        prompt = list(range(100, 180))
        first, reused, fresh = _turns(s, prompt, list(range(300, 340)))
        assert reused.cached_tokens == len(prompt)  # the checkpoint, not the shared prefix less one
        assert reused.token_ids == fresh.token_ids
        # a prompt that parts before the checkpoint cannot resume: a full prefill, still right
        early = final(s.stream(prompt[:40] + [7, 8, 9], limits=Limits(max_tokens=6, stop_at_eos=False)))
        alone = final(s.stream(prompt[:40] + [7, 8, 9], limits=Limits(max_tokens=6, stop_at_eos=False),
                               cache_prompt=False))
        assert early.cached_tokens == 0 and early.token_ids == alone.token_ids
    finally:
        s.close()


def test_a_sliding_window_model_reuses_what_its_window_still_holds(family_gguf):
    from homespec.session import Session

    s = Session.open(RunOptions(model=str(family_gguf["gemma3"]), method="none", ctx=512, threads=1))
    try:
        assert s.backend.n_swa == 32 and not s.backend.swa_full
        prompt = list(range(100, 180))
        first, reused, fresh = _turns(s, prompt, list(range(300, 340)))
        assert reused.cached_tokens >= len(prompt) and reused.token_ids == fresh.token_ids
    finally:
        s.close()


def test_a_conversation_overwritten_in_the_only_lane_comes_back_from_host_ram(smollm2_path):
    """One lane, --cache-ram: A's history is saved when B takes the lane and loaded when A returns."""
    from homespec.engine.core import Engine
    from homespec.session.encode import encode_prompt

    eng = Engine.open(RunOptions(method="ngram", ctx=1024, threads=1, guard=False), parallel=1, queue_size=2,
                      cache_ram=64 << 20).start()
    try:
        tok = eng.tokenizer

        def ask(msgs, cache=True):
            ids = tuple(encode_prompt(tok, msgs, True))
            return final(eng.submit(EngineRequest(ids, 16, cache_prompt=cache)))

        a = [{"role": "user", "content": "Describe the water cycle for a ten year old, step by step, with "
                                         "evaporation, condensation, precipitation and collection. Use an example "
                                         "of a puddle on a sunny day, a cloud over the hills, and a river that "
                                         "carries the rain back to the sea, and end with one question to ask."}]
        a1 = ask(a)
        ask([{"role": "user", "content": "Name a prime number."}])  # B takes the lane: A goes to RAM
        assert eng.stats().host_cache_saves == 1
        a += [{"role": "assistant", "content": a1.text}, {"role": "user", "content": "Shorter, please."}]
        back, fresh = ask(a), ask(a, cache=False)
        s = eng.stats()
        assert s.host_cache_loads == 1
        assert back.cached_tokens >= len(a1.prompt_token_ids)  # A's history came back from RAM
        if back.token_ids != fresh.token_ids:  # the prompt's last token decoded alone: the noise floor
            from homespec.backends.llamacpp.backend import LlamaCppBackend
            from homespec.backends.settings import BackendSettings
            from test_engine_reuse import _near_tie

            with LlamaCppBackend(smollm2_path, BackendSettings(n_ctx=1024, n_threads=1)) as b:
                assert _near_tie(b, back.prompt_token_ids, fresh.token_ids, back.token_ids)
    finally:
        eng.close()


def test_a_hybrid_model_speculates_and_answers_as_plain_decoding(family_gguf):
    """A recurrent state gives rejected draft tokens back (backends/llamacpp/rollback.py): ngram drafts
    chains on the hybrid (Qwen3-Next: restored and replayed), and its greedy answer is plain decoding's."""
    from homespec.session import Session

    # the model counts round blocks of 16 ids (4096, 4097, ... 4111, 4096 ...): the lookup's "4101, 4102 ->
    # 900" is wrong
    prompt = [4101, 4102, 900, 901, 902, 903] + list(range(100, 130)) + [4096]
    path = str(family_gguf["qwen3next-pred"])
    lim = Limits(max_tokens=40, stop_at_eos=False)
    plain = Session.open(RunOptions(model=path, method="none", ctx=256, threads=1))
    try:
        want = final(plain.stream(prompt, limits=lim)).token_ids
    finally:
        plain.close()
    s = Session.open(RunOptions(model=path, method="ngram", ctx=256, threads=1, guard=False))
    try:
        assert s.drafter is not None and s.backend.rollback_mode == "replay"
        out = final(s.stream(prompt, limits=lim))
        assert out.token_ids == want and any(st.accepted for st in out.steps)
        assert any(st.accepted < st.draft_size for st in out.steps)  # and some given back
    finally:
        s.close()
