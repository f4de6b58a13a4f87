"""Every drafter on a hybrid target (recurrent + attention layers), whose state gives rejected drafts
back (backends/llamacpp/rollback.py), on tiny GGUFs of the two ways llama.cpp runs them
(tests/tiny_families.py): Qwen3.5-MoE (llama.cpp's per-token snapshots, "native") and Qwen3-Next (a
saved state restored and the kept tokens decoded again, "replay").

The `predictable` weights count round blocks of 16 ids, so lookups find chains that are taken, and the
prompt holds one that is wrong (the text after 4101, 4102 is not 4103): steps keep some drafts and give
others back. The EAGLE head is a random tiny one: its drafts are given back. Greedy answers equal
`--method none`'s either way; sampled answers repeat with their seed; two lanes with a cancel and a
reused conversation leave nothing behind; the plan's recurrent-state line is what the run holds.
"""

from __future__ import annotations

import pytest

from homespec.engine.options import RunOptions
from homespec.engine.responses import final
from homespec.speculative.steps import Limits
from homespec.plan.lines import LineKind
from seeded_runs import seeded_runs

pytestmark = pytest.mark.slow

MODES = {"qwen35moe": "native", "qwen3next": "replay"}
PROMPT = [4101, 4102, 900, 901, 902, 903] + list(range(100, 130)) + [4096]


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory):
    from tiny_families import make_family_gguf
    from tiny_heads import make_head_dir

    root = tmp_path_factory.mktemp("hybrid-drafters")
    files = {f: str(make_family_gguf(root / f"{f}.gguf", f, predictable=True)) for f in MODES}
    files["head"] = str(make_head_dir(root / "head")[0])
    return files


def _opt(path, method, **kw):
    base = dict(model=path, method=method, ctx=512, threads=2, guard=False, draft_depth=4, draft_topk=1,
                draft_tokens=5)
    base.update(kw)
    return RunOptions(**base)


def _answer(opt, n=40, mode=None, **kw):
    from homespec.session import Session

    s = Session.open(opt)
    try:
        assert mode is None or s.backend.rollback_mode == mode
        return final(s.stream(PROMPT, limits=Limits(max_tokens=n, stop_at_eos=False), **kw))
    finally:
        s.close()


@pytest.mark.parametrize("family", list(MODES))
def test_greedy_answers_with_every_drafter_equal_plain_decoding(hybrid, family):
    path = hybrid[family]
    want = _answer(_opt(path, "none")).token_ids
    ngram = _answer(_opt(path, "ngram"), mode=MODES[family])
    assert ngram.token_ids == want
    spec = [s for s in ngram.steps if s.draft_size]
    assert any(s.accepted == s.draft_size for s in spec) and any(s.accepted < s.draft_size for s in spec)
    passes = len(ngram.steps)
    assert len(ngram.token_ids) / passes > 1.1  # the lookup pays on the model's cycles
    head = _answer(_opt(path, "eagle3", draft=hybrid["head"]), n=16, mode=MODES[family])
    assert head.token_ids == want[:16] and any(s.draft_size for s in head.steps)  # random: given back


def test_sampled_answers_on_a_hybrid_repeat_with_their_seed(hybrid):
    a, b, c = seeded_runs(_opt(hybrid["qwen3next"], "ngram"), PROMPT, 40)
    assert a.token_ids == b.token_ids and a.token_ids != c.token_ids
    assert any(st.accepted for st in a.steps + c.steps)


@pytest.mark.parametrize("family", list(MODES))
def test_two_lanes_cancel_and_reuse_leave_nothing_behind(hybrid, family):
    """Two lanes drafting with ngram: answers equal plain ones; a cancel mid-answer, then that
    conversation's next turn (resumed from the checkpoint after its prompt) equals an answer from an
    empty cache; no lane stays busy and no saved state is left."""
    from homespec.engine.api import EngineRequest
    from homespec.engine.core import Engine
    from homespec.engine.responses import Finish, StepFigures

    path = hybrid[family]
    alone = _answer(_opt(path, "none"), n=24).token_ids
    other = tuple(range(2000, 2030)) + (4101, 4102, 77)
    eng = Engine.open(_opt(path, "ngram"), parallel=2, queue_size=8).start()
    try:
        outs = [final(h) for h in [eng.submit(EngineRequest(p, 24)) for p in (tuple(PROMPT), other)]]
        assert outs[0].token_ids == alone
        h = eng.submit(EngineRequest(other, 200))
        for r in h:
            if isinstance(r, StepFigures) and not r.prefill:
                h.cancel()
        assert isinstance(r, Finish) and r.finish == "cancelled" and r.token_ids
        nxt = other + tuple(r.token_ids[:-1]) + (4101, 4102)
        again = final(eng.submit(EngineRequest(nxt, 24)))
        fresh = final(eng.submit(EngineRequest(nxt, 24, cache_prompt=False)))
        assert again.cached_tokens >= len(other) and again.token_ids == fresh.token_ids
        st = eng.stats()
        assert st.live_sequences == 0 and st.active == 0 and st.spec_num_drafts > 0
        assert not eng.parts.target._snapshots._saved
    finally:
        eng.close()


@pytest.mark.parametrize("family", list(MODES))
@pytest.mark.parametrize("parallel", [1, 2])
def test_the_plan_budgets_the_recurrent_state_the_run_keeps(hybrid, family, parallel):
    """Plan = run: the plan's recurrent-state line is llama.cpp's RS buffer (the state and, under
    native, its n_rs_seq snapshots) plus, under replay, the copy saved on the device before a chain."""
    from homespec.backends.llamacpp import state
    from homespec.backends.llamacpp.lib import parse_buffer_lines
    from homespec.contracts.backend import PrefillWork
    from homespec.engine.assemble import prepare
    from homespec.engine.setup import set_up

    parts = prepare(set_up(_opt(hybrid[family], "ngram", ctx=1024), parallel=parallel))
    try:
        be = parts.owned[0]  # the target
        rs = sum(b.n_bytes for b in parse_buffer_lines([ln.replace(" RS ", " KV ") for ln in be._log.lines
                                                           if " RS buffer size" in ln]))
        parts.target.decode([PrefillWork(0, tuple(PROMPT), True)])
        saved = len(state.read(be, 0, partial=True))  # one sequence's recurrent rows, as the saved copy holds them
        planned = sum(i.bytes for i in parts.plan.items if i.kind == LineKind.RECURRENT_STATE)
        n_rs = be._ll.llama_n_rs_seq(be._ctx)
    finally:
        parts.close()
    assert n_rs == (4 if MODES[family] == "native" else 0) and saved > 4096
    # the copy is saved only where the snapshots do not cover a chain: every chain under replay, none
    # here under native (ngram's chains are as long as the snapshots go)
    measured = rs + (parallel * saved if MODES[family] == "replay" else 0)
    # llama.cpp logs MiB with 2 decimals: the tiny model's RS buffer is good to ~5 KiB
    assert abs(measured - planned) <= max(0.05 * measured, 0.006 * (1 << 20)), (rs, saved, planned)
