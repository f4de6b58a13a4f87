"""One request's failure fails that request alone; if the engine thread dies anyway, every waiting
request fails at once, submit refuses, /health answers 503 with the reason, and `homespec serve`
exits non-zero (homespec.engine.supervise, homespec.server.run). The real SmolLM2 on the engine
with several lanes; the death is caused by the backend's llama_decode raising SystemExit, the one way left for
the engine thread to stop."""

from __future__ import annotations

import http.client
import json
import logging
import threading
import time

import pytest

from homespec.engine.api import EngineFailed, EngineRequest
from homespec.errors import HomespecError
from homespec.session import final
from homespec.engine.options import RunOptions
from homespec.speculative.sampling import Sampler

pytestmark = pytest.mark.slow
N = 24


def _open(parallel=2, queue_size=4):
    from homespec.engine.core import Engine

    return Engine.open(RunOptions(method="none", ctx=256, threads=1), parallel=parallel, queue_size=queue_size,
                       cache_prompt=False).start()


@pytest.fixture(scope="module")
def engine():
    eng = _open(parallel=3)
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def prompt(engine):
    from homespec.session.encode import encode_prompt

    return tuple(encode_prompt(engine.tokenizer, ["Tell me about the sea."], chat=True))


class BrokenSampler(Sampler):
    """A sampler whose distribution raises: a request whose own verification fails."""

    def probs(self, logits):
        raise RuntimeError("this request's sampling broke")


def test_a_failing_request_fails_alone_beside_two_innocent_ones(engine, prompt, caplog):
    innocent = [engine.submit(EngineRequest(prompt_ids=prompt, max_tokens=N)) for _ in range(2)]
    with caplog.at_level(logging.ERROR, logger="homespec.engine"):
        hostile = engine.submit(EngineRequest(prompt_ids=prompt, max_tokens=N,
                                              sampler=BrokenSampler(temperature=1.0), seed=2**64))
        bad = final(hostile)
    good = [final(h) for h in innocent]
    assert [f.finish for f in good] == ["length", "length"] and all(len(f.token_ids) == N for f in good)
    assert bad.finish is None and "sampling broke" in hostile.error.message
    assert any(r.exc_info for r in caplog.records if "failed" in r.getMessage())  # the log has the traceback
    again = final(engine.submit(EngineRequest(prompt_ids=prompt, max_tokens=4)))
    assert again.finish == "length" and engine.failure is None and engine.stats().live_sequences == 0


@pytest.mark.parametrize("seed", [2**64, -(2**63) - 5, 2**200])
def test_any_integer_seed_is_a_seed(engine, prompt, seed):
    f = final(engine.submit(EngineRequest(prompt_ids=prompt, max_tokens=4, sampler=Sampler(temperature=0.8, seed=seed),
                                          seed=seed)))
    assert f.finish == "length" and len(f.token_ids) == 4


def _kill_decode(eng) -> None:
    def decode(work):
        raise SystemExit("llama_decode is gone")

    eng.target.decode = decode


def test_a_dead_engine_fails_every_waiting_request_at_once(prompt):
    eng = _open(parallel=2, queue_size=4)
    try:
        _kill_decode(eng)
        handles = [eng.submit(EngineRequest(prompt_ids=prompt, max_tokens=N)) for _ in range(4)]  # 2 run, 2 wait
        t0 = time.monotonic()
        ends = [final(h) for h in handles]
        assert time.monotonic() - t0 < 10
        assert all(f.finish is None for f in ends) and all("engine stopped" in h.error.message for h in handles)
        assert "SystemExit: llama_decode is gone" in eng.failure
        with pytest.raises(EngineFailed):
            eng.submit(EngineRequest(prompt_ids=prompt, max_tokens=1))
    finally:
        eng.close(timeout_s=1)


def _get(port: int, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request(method, path, body=json.dumps(body) if body else None, headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    out = r.status, json.loads(r.read() or b"{}")
    conn.close()
    return out


def test_the_server_says_so_on_health_and_exits_non_zero(prompt):
    from homespec.server.launch import serve_engine
    from homespec.server.run import bind

    eng = _open(parallel=1, queue_size=2)
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    outcome: dict[str, BaseException] = {}

    def run() -> None:
        try:
            serve_engine(eng, sock, host="127.0.0.1", api_key=None, name="smol", max_body=1 << 20)
        except HomespecError as e:
            outcome["error"] = e

    server = threading.Thread(target=run, daemon=True)
    server.start()
    ask = {"model": "x", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0}
    deadline = time.monotonic() + 30
    while True:
        try:
            assert _get(port, "GET", "/health") == (200, {"status": "ok"})
            break
        except ConnectionError:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    assert _get(port, "POST", "/v1/chat/completions", ask)[0] == 200
    _kill_decode(eng)
    status, body = _get(port, "POST", "/v1/chat/completions", ask)
    assert status == 500 and "engine stopped" in body["error"]["message"]
    status, body = _get(port, "GET", "/health")
    assert status == 503 and body["error"]["code"] == "engine_failed" and "SystemExit" in body["error"]["message"]
    status, body = _get(port, "POST", "/v1/chat/completions", ask)
    assert status == 503 and body["error"]["code"] == "engine_failed"
    server.join(30)
    assert not server.is_alive()
    err = outcome["error"]
    assert err.exit_code == 1 and "the engine stopped: SystemExit" in err.message


def test_retry_after_counts_every_request_ahead(prompt):
    """A full queue's Retry-After is the wait for every request ahead: rounds of `slots` answers of
    the recent mean time (it was one answer's time, whatever the queue held)."""
    from homespec.engine.api import QueueFull

    eng = _open(parallel=1, queue_size=2)
    try:
        final(eng.submit(EngineRequest(prompt_ids=prompt, max_tokens=8)))  # one answer's time, measured
        held = [eng.submit(EngineRequest(prompt_ids=prompt, max_tokens=200))]
        deadline = time.monotonic() + 30
        while eng.stats().active < 1:  # it holds the slot
            assert time.monotonic() < deadline
            time.sleep(0.01)
        held += [eng.submit(EngineRequest(prompt_ids=prompt, max_tokens=4)) for _ in range(2)]  # these two wait
        with pytest.raises(QueueFull) as full:
            eng.submit(EngineRequest(prompt_ids=prompt, max_tokens=4))
        mean = eng._request_s
        assert full.value.retry_after_s == pytest.approx(max(1.0, 3 * mean))  # 2 waiting + this one, 1 slot
        for h in held:
            h.cancel()
    finally:
        eng.close(timeout_s=1)
