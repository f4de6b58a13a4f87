"""--method auto on the real SmolLM2: greedy answers equal plain decoding's (within the backend's
noise floor, docs/architecture.md contract 1) whatever the guard picks, one lane or several
(lanes copying beside lanes chatting), with prompt reuse; each step says who drafted it, and the
engine's counters add up per drafter."""

from __future__ import annotations

import numpy as np
import pytest

from homespec.engine.api import EngineRequest
from homespec.engine.options import RunOptions
from homespec.engine.responses import final

pytestmark = pytest.mark.slow

CHAIN = dict(ctx=512, threads=1, draft_depth=4, draft_topk=1, draft_tokens=5)
NEAR_TIE = 1.6  # the batched kernels' largest logit difference (tests/engine/test_engine_batched.py)
N = 48


@pytest.fixture(scope="module")
def prompts():
    """Two edit prompts (answers that copy) and two chat prompts (answers that do not)."""
    from homespec.promptsets import load_prompts

    edits = [i for i in load_prompts("edit") if i.category in ("rename", "rewrite")][:2]
    chats = [i for i in load_prompts("test") if i.category == "chat"][:2]
    return edits + chats


def _ids(engine, items):
    from homespec.session.encode import encode_prompt

    return [tuple(encode_prompt(engine.tokenizer, i.turns, True)) for i in items]


def _open(method: str, parallel: int, guard: bool):
    from homespec.engine.core import Engine

    return Engine.open(RunOptions(method=method, guard=guard, **CHAIN), parallel=parallel, queue_size=8,
                       cache_prompt=False)


def _answers(engine, ids, n=N):
    handles = [engine.submit(EngineRequest(prompt_ids=p, max_tokens=n)) for p in ids]
    if engine._thread is None:
        while not engine.idle:
            engine.step()
    return [final(h) for h in handles]


@pytest.fixture(scope="module")
def plain(prompts):
    eng = _open("none", 1, guard=False)
    try:
        ids = _ids(eng, prompts)
        return ids, [a.token_ids for a in _answers(eng, ids)]
    finally:
        eng.close()


def _within_floor(ids, reference, answers, smollm2_path) -> int:
    """-> answers identical to plain; any other must part from it at a near-tie of the target."""
    same = sum(a == r for a, r in zip(answers, reference))
    print(f"identical answers: {same} of {len(answers)}")
    if same < len(answers):
        from homespec.backends.llamacpp.backend import LlamaCppBackend
        from homespec.backends.settings import BackendSettings

        with LlamaCppBackend(smollm2_path, BackendSettings(n_ctx=512, n_ubatch=32, n_threads=1)) as b:
            for p, r, a in zip(ids, reference, answers):
                if a != r:
                    k = next(i for i, (x, y) in enumerate(zip(a, r)) if x != y)
                    top2 = np.sort(b.score(list(p) + list(r[:k]))[-1])[::-1][:2]
                    assert float(top2[0] - top2[1]) < NEAR_TIE, f"answers part at token {k}, not a near-tie"
    return same


def _price(engine, per_row: float, base: float = 0.0) -> None:
    """Give the guard a cost table before any pass: `base + per_row x rows` for 2 .. 16 rows, as
    often as a median needs (this machine's real passes then refine it)."""
    from homespec.speculative.guard import SAMPLES

    for rows in range(2, 17):
        for _ in range(SAMPLES):
            engine.guard.record_pass(rows, base + per_row * rows)


@pytest.mark.parametrize("guard", [False, True])
def test_one_lane_greedy_auto_equals_plain(prompts, plain, guard, smollm2_path):
    ids, reference = plain
    eng = _open("auto", 1, guard=guard)
    if guard:  # rows priced as a GPU's (nearly free): copying pays, whatever this CPU's rows cost
        _price(eng, 1e-5, base=0.001)
    try:
        answers = _answers(eng, ids)
        stats = eng.stats()
    finally:
        eng.close()
    assert _within_floor(ids, reference, [a.token_ids for a in answers], smollm2_path) >= len(ids) - 1
    drafted = {s.drafter for a in answers for s in a.steps if s.draft_size > 0}
    assert drafted & {"ngram", "suffix"}  # the edit prompts' answers copy
    assert drafted <= {"ngram", "suffix", "eagle3"}
    assert all(s.drafter is None for a in answers for s in a.steps if s.draft_size == 0)
    by = stats.spec_by_drafter
    assert sum(v[0] for v in by.values()) == stats.spec_num_drafts
    assert sum(v[2] for v in by.values()) == stats.spec_num_accepted_tokens
    if not guard:  # forced: the longest chain when a lookup finds one, else the head's draft
        assert "eagle3" in by


def test_where_no_chain_can_pay_the_lookups_do_not_search(prompts, plain, smollm2_path):
    """Rows priced as a loaded CPU's (every row a whole forward's worth): even a chain of 8 accepted
    in full would lose, so the lookups do not search and every step is plain, the answers plain
    decoding's own."""
    ids, reference = plain
    eng = _open("auto", 1, guard=True)
    _price(eng, 1.0)
    try:
        answers = _answers(eng, ids)
        guard = eng.guard
    finally:
        eng.close()
    assert _within_floor(ids, reference, [a.token_ids for a in answers], smollm2_path) == len(ids)
    assert not {s.drafter for a in answers for s in a.steps} & {"ngram", "suffix"}
    assert guard.unsearched >= sum(len(a.steps) - 2 for a in answers)  # (nearly) every step after the first token


def test_lanes_copying_beside_lanes_chatting_equal_plain(prompts, plain, smollm2_path):
    ids, reference = plain
    eng = _open("auto", 4, guard=False).start()
    try:
        answers = _answers(eng, ids)
        by = eng.stats().spec_by_drafter
    finally:
        eng.close()
    # four prompts prefilled in one micro-batch take the tiled kernel: answers may part at near-ties
    assert _within_floor(ids, reference, [a.token_ids for a in answers], smollm2_path) >= len(ids) // 2
    assert {"eagle3"} < set(by) and by["eagle3"][0] > 0


def test_a_reused_prefix_keeps_every_drafter_in_step(prompts, smollm2_path):
    """A conversation's second turn reuses the first's cache: the head is trimmed with the lane
    and the lookups search the whole conversation; the answer is plain decoding's."""
    from homespec.engine.core import Engine

    opt = RunOptions(method="auto", guard=False, **CHAIN)
    eng, ref = Engine.open(opt, parallel=1, queue_size=2), Engine.open(RunOptions(method="none", **CHAIN), queue_size=2)
    try:
        first = _ids(eng, prompts[:1])[0]
        answer = _answers(eng, [first])[0].token_ids
        follow = first + tuple(answer) + tuple(eng.tokenizer.encode("\nThanks. Now do it again."))
        second = _answers(eng, [follow])[0]
        assert second.cached_tokens > len(first)
        expect = _answers(ref, [follow])[0].token_ids
    finally:
        eng.close()
        ref.close()
    assert _within_floor([follow], [expect], [second.token_ids], smollm2_path) == 1


def test_sampled_answers_verify_copied_chains(prompts):
    """Under sampling a copied chain is verified by the deterministic-children rule, which keeps the
    target's distribution (docs/speculative.md; tests/speculative/test_verify.py measures it): the engine runs it
    and keeps what the rule accepts. (Which tokens a seed gives depends on the drafts verified, as
    with any drafter under the guard: the coins a step draws follow its tree.)"""
    from homespec.speculative.sampling import Sampler

    eng = _open("auto", 1, guard=False)
    try:
        ids = _ids(eng, prompts[:1])[0]
        sampler = Sampler(temperature=0.5, top_p=0.9)
        handles = [eng.submit(EngineRequest(prompt_ids=ids, max_tokens=32, sampler=sampler, seed=s)) for s in (5, 6)]
        while not eng.idle:
            eng.step()
        runs = [final(h) for h in handles]
    finally:
        eng.close()
    assert all(r.finish in ("length", "eos") and len(r.token_ids) <= 32 for r in runs)
    chains = [s for r in runs for s in r.steps if s.drafter in ("ngram", "suffix")]
    assert chains and sum(s.accepted for s in chains) > 0
