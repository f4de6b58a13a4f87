"""`--method mtp`: a model's own MTP layers drafting through llama.cpp's MTP graph beside it
(backends/llamacpp/mtp.py, speculative/drafters/mtp.py), on tiny GGUFs of two real architectures with one
MTP block each (tests/tiny_families.py): a Qwen3.5-MoE-style hybrid (Gated DeltaNet + attention) and a
GLM-4.5-style MoE.

Random weights make the drafts mostly wrong (every step gives tokens back); `predictable` weights make the
next token a function of the last one, which the MTP block, passing the token's embedding through, also
computes: its drafts are mostly right. Greedy answers equal `--method none`'s either way.
"""

from __future__ import annotations

import pytest

from homespec.engine.options import RunOptions
from homespec.engine.responses import final
from homespec.speculative.steps import Limits
from homespec.plan.lines import LineKind
from seeded_runs import seeded_runs

FAMILIES = ("qwen35moe", "glm4moe")
PROMPT = [504, 3575, 282, 4649, 314] + list(range(1000, 1030))


@pytest.fixture(scope="module")
def mtp_gguf(tmp_path_factory):
    from tiny_families import make_family_gguf

    root = tmp_path_factory.mktemp("mtp")
    return {(f, pred): str(make_family_gguf(root / f"{f}{'-pred' if pred else ''}.gguf", f, mtp=1, predictable=pred))
            for f in FAMILIES for pred in (False, True)}


def _opt(path, method, **kw):
    base = dict(model=path, method=method, ctx=512, threads=2, guard=False, draft_depth=3, draft_topk=1,
                draft_tokens=4)
    base.update(kw)
    return RunOptions(**base)


def _answer(path, method, n=40, **kw):
    from homespec.session import Session

    s = Session.open(_opt(path, method, **kw))
    try:
        return final(s.stream(PROMPT, limits=Limits(max_tokens=n, stop_at_eos=False)))
    finally:
        s.close()


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("pred", [False, True])
def test_greedy_mtp_answers_are_plain_greedy_answers(mtp_gguf, family, pred):
    path = mtp_gguf[(family, pred)]
    plain, mtp = _answer(path, "none"), _answer(path, "mtp")
    assert mtp.token_ids == plain.token_ids
    spec = [s for s in mtp.steps if s.draft_size > 0]
    assert spec, "the MTP layers drafted"
    accepted = sum(s.accepted for s in spec)
    if pred:  # the predictable model: the drafts are taken
        assert (len(mtp.token_ids) - 1) / len(spec) > 1.5 and accepted > 0
    else:  # random weights: drafts given back, state and all
        assert accepted < sum(s.draft_size for s in spec)


def test_a_tree_of_mtp_drafts_equals_plain_greedy_too(mtp_gguf):
    path = mtp_gguf[("glm4moe", True)]  # attention only: trees verify in one pass
    tree = _answer(path, "mtp", draft_depth=3, draft_topk=3, draft_tokens=8)
    assert tree.token_ids == _answer(path, "none").token_ids
    assert max(s.draft_size for s in tree.steps) > 3  # wider than a chain


@pytest.mark.slow
def test_sampled_mtp_answers_are_reproducible_with_a_seed(mtp_gguf):
    a, b, c = seeded_runs(_opt(mtp_gguf[("qwen35moe", True)], "mtp"), PROMPT, 30)
    assert a.token_ids == b.token_ids and a.token_ids != c.token_ids
    assert any(st.accepted for st in a.steps)


def test_auto_drafts_with_the_mtp_layers_where_the_model_has_them(mtp_gguf, smollm2_path):
    from homespec.session import Session
    from homespec.speculative.drafters.mtp import MtpDrafter

    s = Session.open(_opt(mtp_gguf[("qwen35moe", True)], "auto", draft=None))
    try:
        assert isinstance(s.drafter.model, MtpDrafter) and s.drafter.shape.topk == 1
        out = final(s.stream(PROMPT, limits=Limits(max_tokens=30, stop_at_eos=False)))
        assert out.token_ids == _answer(mtp_gguf[("qwen35moe", True)], "none", n=30).token_ids
    finally:
        s.close()
    s = Session.open(_opt(str(smollm2_path), "auto", draft="none"))
    try:
        assert not isinstance(getattr(s.drafter, "model", None), MtpDrafter)
    finally:
        s.close()


def test_mtp_on_a_model_without_mtp_layers_is_a_usage_error(capsys, smollm2_path):
    from homespec.cli import main

    code = main(["generate", "--model", str(smollm2_path), "--method", "mtp", "-p", "hi", "-n", "2"])
    err = capsys.readouterr().err
    assert code == 2 and "error:" in err and "no MTP layers" in err and "hint:" in err


def _tree_ids_empty(net) -> bool:
    """No tree node left: every tree id holds the committed entries alone (its lane's base's, which
    every tree id carries), no cell past them."""
    ll, mem = net._ll, net._mem

    def span(s: int) -> tuple[int, int]:
        return ll.llama_memory_seq_pos_min(mem, s), ll.llama_memory_seq_pos_max(mem, s)

    return all(span(s) == span(ids.base) for ids in net._ids for s in ids.tree)


@pytest.mark.slow
def test_two_lanes_draft_with_one_mtp_network_and_leak_nothing(mtp_gguf):
    """Two lanes, one MTP context: answers equal plain ones; a cancel mid-answer, then the cancelled
    conversation's next turn (resumed from the checkpoint after its prompt: a recurrent state is not cut
    anywhere else), leave no lane busy and no tree node in the network, and the next turn's answer
    equals one from an empty cache."""
    from homespec.engine.api import EngineRequest
    from homespec.engine.core import Engine
    from homespec.engine.responses import Finish, StepFigures

    path = mtp_gguf[("qwen35moe", True)]
    prompts = [tuple(PROMPT), tuple(range(2000, 2040)), tuple(PROMPT[:20] + list(range(3000, 3010)))]
    alone = _answer(path, "none", n=24).token_ids
    eng = Engine.open(_opt(path, "mtp"), parallel=2, queue_size=8).start()
    try:
        outs = [final(h) for h in [eng.submit(EngineRequest(p, 24)) for p in prompts]]
        assert outs[0].token_ids == alone
        h = eng.submit(EngineRequest(prompts[1], 200))
        for r in h:
            if isinstance(r, StepFigures) and not r.prefill:
                h.cancel()
        assert isinstance(r, Finish) and r.finish == "cancelled" and r.token_ids
        nxt = prompts[1] + tuple(r.token_ids[:-1]) + tuple(range(4000, 4010))
        again = final(eng.submit(EngineRequest(nxt, 24)))
        fresh = final(eng.submit(EngineRequest(nxt, 24, cache_prompt=False)))
        assert again.cached_tokens >= len(prompts[1]) and again.token_ids == fresh.token_ids
        assert any(s.accepted for s in again.steps)
        st = eng.stats()
        assert st.live_sequences == 0 and st.active == 0
        assert _tree_ids_empty(eng.parts.drafters[0].net)
    finally:
        eng.close()


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("parallel", [1, 2])
def test_the_plan_budgets_what_the_mtp_layers_allocate(mtp_gguf, family, parallel):
    """Plan = run: llama.cpp's own buffer lines for the MTP context (KV, compute + output) and the MTP
    blocks' tensors against the plan's draft lines, within 5 % each; one lane and two, on the hybrid and
    on the attention-only MoE."""
    from homespec.engine.assemble import prepare
    from homespec.engine.setup import set_up

    parts = prepare(set_up(_opt(mtp_gguf[(family, False)], "mtp", ctx=2048), parallel=parallel))
    try:
        rep = parts.drafters[0].net.memory_report()
        measured = {"weights": rep.weights_bytes, "kv": rep.kv_bytes, "compute": rep.compute_bytes,
                    "total": rep.total_bytes}
        items = parts.plan.items

        def planned(*names):
            return sum(i.bytes for i in items if i.kind in names)

        want = {"weights": planned(LineKind.DRAFT_WEIGHTS), "kv": planned(LineKind.DRAFT_KV),
                "compute": planned(LineKind.DRAFT_COMPUTE, LineKind.DRAFT_OUTPUT)}
        want["total"] = sum(want.values())
    finally:
        parts.close()
    for key in want:
        assert abs(measured[key] - want[key]) <= 0.05 * measured[key], (key, measured, want)


@pytest.mark.parametrize("family", FAMILIES)
def test_an_mtp_seed_after_its_entries_drafts_what_it_drafts_alone(mtp_gguf, family):
    """Several MTP graphs take their next rows before they select the outputs, so a call of committed entries
    and the seed would hand back the first entry's row: the MTP network writes the entries first and seeds
    alone (LlamaCppMtp._prunes_rows), and drafts what a write and a seed in two calls draft."""
    import numpy as np

    from homespec.backends.llamacpp.backend import LlamaCppBackend
    from homespec.backends.llamacpp.drafters import open_mtp
    from homespec.backends.settings import BackendSettings

    target = LlamaCppBackend(mtp_gguf[(family, True)], BackendSettings(n_ctx=512, n_threads=2, load_mtp=True),
                             max_leaves=1 if family == "qwen35moe" else 4)
    net = open_mtp(target, _opt(mtp_gguf[(family, True)], "mtp"))
    try:
        assert not net._rows_pruned
        fwd = target.prefill(PROMPT)
        root = int(np.argmax(fwd.logits[-1]))
        g, tokens = net.encode(fwd.features), [*PROMPT[1:], root]
        one = net.seed(net.new_lane(), tokens, g, 0, 1)
        lane = net.new_lane() if net.lanes > 1 else None
        if lane is None:  # one lane: start it again
            net.reset(0)
            lane = 0
        net.write(lane, tokens[:-1], g[:-1], 0)
        two = net.seed(lane, tokens[-1:], g[-1:], len(tokens) - 1, 1)
        assert one.ids.tolist() == two.ids.tolist()
        assert np.allclose(one.hidden, two.hidden, atol=1e-4)
    finally:
        net.close()
        target.close()
