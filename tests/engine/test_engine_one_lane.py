"""The engine with one lane on its own thread (`serve --parallel 1`, and how torch and EXL2 serve),
on the real SmolLM2 (plain decoding, a small context): it answers what the Session answers,
cancels between steps, refuses beyond its queue, tallies its counters, closes."""

from __future__ import annotations

import pytest

from homespec.engine.api import EngineClosed, EngineRequest, EngineStats, QueueFull
from homespec.engine.setup import check_parallel
from homespec.engine.core import Engine
from homespec.engine.options import RunOptions
from homespec.engine.tally import SpeedWindow, add_finish, add_steps
from homespec.errors import UsageError
from homespec.engine.responses import Finish, StepFigures, TextDelta
from homespec.speculative.steps import Step


def _step(draft_size: int, accepted: int, speculative: bool = True) -> Step:
    return Step(tuple(range(accepted + 1)), accepted, draft_size, 0, 0.0, 0.0, 0.01, speculative)


def test_speculation_counters_follow_vllms_rules():
    s = EngineStats()
    add_steps(s, [_step(0, 0, speculative=False), _step(4, 2), _step(4, 0), _step(4, 3), _step(0, 0)])
    assert (s.spec_num_drafts, s.spec_num_draft_tokens, s.spec_num_accepted_tokens) == (3, 12, 5)
    assert s.spec_accepted_per_pos == [2, 2, 1]  # accepted at position p needs every position before it
    assert sum(s.spec_accepted_per_pos) == s.spec_num_accepted_tokens


def test_a_finish_adds_its_request_and_tokens():
    s = EngineStats()
    steps = (_step(0, 0, speculative=False), _step(3, 1))
    add_finish(s, Finish("length", "ab", (1, 2, 3), (9, 9), steps, 0.1, 0.2))
    add_finish(s, Finish("cancelled", "", (), (9,), (), 0.0, 0.0))
    assert (s.requests_finished, s.requests_cancelled) == (1, 1)
    assert (s.prompt_tokens_total, s.generation_tokens_total, s.target_passes_total) == (3, 3, 2)
    assert s.spec_num_drafts == 1 and s.spec_accepted_per_pos == [1]


def test_the_speed_window_forgets_old_tokens():
    w = SpeedWindow(span_s=10.0)
    w.add(50, now=0.0)
    w.add(30, now=8.0)
    assert w.rate(now=9.0) == 8.0 and w.rate(now=15.0) == 3.0 and w.rate(now=30.0) == 0.0


@pytest.mark.parametrize("opt, parallel", [(RunOptions(), 0), (RunOptions(backend="torch"), 2),
                                           (RunOptions(method="draft", draft="x.gguf"), 2), (RunOptions(exact=True), 2)])
def test_lanes_the_target_cannot_run_are_usage_errors_naming_the_flag(opt, parallel):
    with pytest.raises(UsageError, match="--parallel|lanes") as e:
        check_parallel(opt, parallel)
    assert e.value.hint and e.value.exit_code == 2


@pytest.fixture(scope="module")
def engine(smollm2_path):
    from homespec.cli.options import RunArgs

    opts = RunArgs(method="none", ctx=256, threads=1).options()
    e = Engine.open(opts, parallel=1, queue_size=1).start()
    yield e
    e.close()


def _ids(engine, text: str) -> tuple[int, ...]:
    return tuple(engine.tokenizer.encode(text, add_bos=True))


def test_an_answer_is_the_sessions_answer(engine):
    from homespec.session import final
    from homespec.speculative.steps import Limits

    req = EngineRequest(prompt_ids=_ids(engine, "The capital of France is"), max_tokens=8)
    responses = list(engine.submit(req))
    fin = responses[-1]
    assert isinstance(fin, Finish) and fin.finish == "length" and len(fin.token_ids) == 8
    assert sum(isinstance(r, StepFigures) for r in responses) == fin.target_passes
    assert "".join(r.text for r in responses if isinstance(r, TextDelta)) == fin.text
    from homespec.session import Session

    with_session = Session.open(RunOptions(method="none", ctx=256, threads=1))
    try:
        alone = final(with_session.stream(req.prompt_ids, limits=Limits(max_tokens=8)))
    finally:
        with_session.close()
    assert alone.token_ids == fin.token_ids
    s = engine.stats()
    assert s.requests_finished >= 1 and s.active == 0 and s.live_sequences == 0 and s.queued == 0


def test_a_cancelled_request_ends_between_steps(engine):
    before = engine.stats()
    handle = engine.submit(EngineRequest(prompt_ids=_ids(engine, "Once upon a time"), max_tokens=200))
    for n, r in enumerate(handle):
        if n == 3:
            handle.cancel()
        last = r
    assert isinstance(last, Finish) and last.finish == "cancelled" and 0 < len(last.token_ids) < 200
    after = engine.stats()
    assert after.requests_cancelled == before.requests_cancelled + 1 and after.live_sequences == 0


def test_beyond_the_queue_a_request_is_refused_with_a_retry_time(engine):
    long = EngineRequest(prompt_ids=_ids(engine, "Once upon a time"), max_tokens=200)
    running = engine.submit(long)
    assert isinstance(running.get(timeout=60), StepFigures)  # it left the queue: it is being decoded
    waiting = engine.submit(long)  # the one place in the queue
    assert engine.stats().queued == 1
    with pytest.raises(QueueFull) as e:
        engine.submit(long)
    assert e.value.retry_after_s >= 1
    waiting.cancel()
    running.cancel()
    assert [r for r in waiting][-1].finish == "cancelled"
    assert [r for r in running][-1].finish == "cancelled"


def test_a_request_the_target_fails_ends_with_its_error_and_the_next_is_served(engine):
    failed = engine.submit(EngineRequest(prompt_ids=(1, 10**9), max_tokens=4))  # no such token
    assert list(failed)[-1].finish is None and "invalid token" in str(failed.error)
    assert list(engine.submit(EngineRequest(prompt_ids=_ids(engine, "Hello"), max_tokens=3)))[-1].finish == "length"


def test_close_lets_what_runs_and_waits_finish_and_refuses_what_comes(engine):
    long = EngineRequest(prompt_ids=_ids(engine, "Once upon a time"), max_tokens=40)
    running = engine.submit(long)
    running.get(timeout=60)
    waiting = engine.submit(long)
    engine.close(timeout_s=60)
    assert list(running)[-1].finish == "length" and list(waiting)[-1].finish == "length"
    with pytest.raises(EngineClosed):
        engine.submit(long)
    engine.close()  # a second close does nothing
