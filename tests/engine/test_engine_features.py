"""A viewed tree pass hands its feature rows out where llama.cpp's extraction put them (FeatureRows,
gathered when read): the engine must read the accepted path's rows before anything decodes again."""

from __future__ import annotations

import numpy as np
import pytest


def _accepted_features(lazy: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[list, int]:
    from homespec.backends.llamacpp.features import LayerInputCapture
    from homespec.cli.options import RunArgs
    from homespec.engine.api import EngineRequest
    from homespec.engine.core import Engine, follow
    from homespec.session.encode import encode_prompt

    from homespec.backends.llamacpp.core import LlamaCppCore

    with monkeypatch.context() as m:
        if not lazy:  # the eager copy every pass used to make
            m.delattr(LayerInputCapture, "rows")
        m.setattr(LlamaCppCore, "_keep_in_order", lambda *a, **k: False)  # no cell moves: the tail is decoded again
        engine = Engine.open(RunArgs(method="eagle3", ctx=1024, threads=2, guard=False, draft_depth=6,
                                     draft_topk=8, draft_tokens=48).options())
        try:
            drafter, seen = engine.parts.drafters[0], []
            accept = drafter.accept
            drafter.accept = lambda tokens, feats, nxt: (seen.append(np.array(feats)), accept(tokens, feats, nxt))[1]
            ids = encode_prompt(engine.tokenizer, ["Write a short poem about the sea."], chat=True)
            list(follow(engine, engine.submit(EngineRequest(tuple(ids), 48))))
            return seen, engine.parts.backend.order_repairs
        finally:
            engine.close()


@pytest.mark.slow
def test_the_drafter_gets_its_paths_features_before_a_commit_decodes_again(monkeypatch):
    """Trees every step; where a later child is kept the commit re-decodes the path's tail (flash
    attention sums cells in cell order; where homespec's patch cannot move the cells instead), which
    rewrites the extraction buffers: the rows handed to the drafter are the pass's own, equal to the
    eager copy's, step by step."""
    lazy, repairs = _accepted_features(True, monkeypatch)
    eager, repairs_eager = _accepted_features(False, monkeypatch)
    assert repairs == repairs_eager > 0
    assert len(lazy) == len(eager) and all(np.array_equal(a, b) for a, b in zip(lazy, eager))
