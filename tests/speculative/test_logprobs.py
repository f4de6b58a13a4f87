"""Log-probabilities of emitted tokens (homespec/speculative/logprobs.py): the target's own values at
every position, drafted tokens included, so speculation gives what plain decoding gives."""

from __future__ import annotations

import math

import pytest
import numpy as np

from homespec.speculative.logprobs import token_logprobs


def test_each_token_is_scored_on_its_own_row():
    logits = np.array([[2.0, 1.0, 0.0], [0.0, 0.0, 3.0]], dtype=np.float32)
    a, b = token_logprobs(logits, [1, 2], top_n=2)
    assert a.token == 1 and a.logprob == pytest.approx(1.0 - math.log(math.exp(2) + math.exp(1) + 1))
    assert [t for t, _ in a.top] == [0, 1] and b.top[0][0] == 2
    assert token_logprobs(logits, [0], top_n=0)[0].top == ()
    assert token_logprobs(logits, [], top_n=3) == ()


@pytest.mark.slow
def test_speculative_logprobs_equal_plain_decodings():
    """Greedy, the same prompt: plain decoding and the EAGLE head drafting on every step give the
    same tokens with log-probabilities equal within the backend's batch-vs-single noise floor
    (docs/backends.md; llama-server gives 0.0 for every drafted token)."""
    from homespec.cli.options import RunArgs
    from homespec.engine.api import EngineRequest
    from homespec.engine.core import Engine, follow
    from homespec.engine.responses import Finish, TextDelta
    from homespec.session.encode import encode_prompt

    from homespec.backends.llamacpp.core import LlamaCppCore

    runs, repairs, moves = {}, {}, {}
    for method, guard in (("none", True), ("eagle3", True), ("eagle3-trees", False), ("eagle3-trees-redecode", False)):
        shape = {"draft_depth": 6, "draft_topk": 8, "draft_tokens": 48} if "trees" in method else {}
        engine = Engine.open(RunArgs(method=method.split("-")[0], ctx=1024, threads=2, guard=guard, **shape).options())
        if method.endswith("redecode"):  # no cell moves (homespec's patch): the kept tail is decoded again
            engine.parts.backend._keep_in_order = lambda *a, **k: False
        moves[method] = getattr(engine.parts.backend, "_keep_native", None) is not None
        try:
            ids = encode_prompt(engine.tokenizer, ["Write a short poem about the sea."], chat=True)
            out = list(follow(engine, engine.submit(EngineRequest(tuple(ids), 48, logprobs=3))))
            repairs[method] = getattr(engine.parts.backend, "order_repairs", 0)
        finally:
            engine.close()
        scores = [s for r in out if isinstance(r, TextDelta) for s in r.logprobs]
        runs[method] = (scores, next(r for r in out if isinstance(r, Finish)))
    plain, _ = runs["none"]
    # without the guard every step drafts a tree; where a later child is kept, the commit moves the
    # path's tail into cell order (homespec's patch) or re-decodes it (flash attention sums cells in
    # cell order): a step's log-probabilities come from the pass's own rows all the same (the re-decode
    # asks for no logits; the feature rows it does rewrite are tests/engine/test_engine_features.py's)
    assert repairs["eagle3-trees-redecode"] > 0 or not engine.parts.backend.flash_attn_active
    assert repairs["eagle3-trees"] == 0 or not moves["eagle3-trees"]
    for method in ("eagle3", "eagle3-trees", "eagle3-trees-redecode"):
        spec, fin = runs[method]
        assert sum(s.accepted for s in fin.steps) > 0  # drafted tokens were accepted and scored
        assert [s.token for s in spec] == [s.token for s in plain] == list(fin.token_ids)
        worst = max(abs(a.logprob - b.logprob) for a, b in zip(spec, plain))
        assert worst < 0.05, (method, worst)  # the noise floor: 0.0 measured here at this length
        assert all([t for t, _ in a.top] == [t for t, _ in b.top] for a, b in zip(spec, plain))
