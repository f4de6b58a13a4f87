"""`homespec serve` end to end: one real server on the embedded SmolLM2 on 127.0.0.1, driven by the
official openai client and by raw HTTP for what a client library would refuse to send.

The main server drafts with the shipped EAGLE head on every step (--no-guard: the speculation
counters move) on the batched engine, with the slots the plan gives it (4 here); a second, plain
one with --parallel 1 --queue 1 is filled to answer 503, then stopped with SIGTERM.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

openai = pytest.importorskip("openai")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
KEY = "test-key-1234"
CTX = 512
THREADS = 2
ALIAS = "smol"
QUESTION = "What is the capital of France?"
TEXT_PROMPT = "The capital of France is"


class Server:
    """A `homespec serve` subprocess on a free port, its URL read from the line it prints."""

    def __init__(self, *args: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        env.pop("HOMESPEC_API_KEY", None)
        self.proc = subprocess.Popen([sys.executable, "-m", "homespec", "serve", "--port", "0", *args], cwd=ROOT,
                                     env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.err: list[str] = []
        threading.Thread(target=self._drain_stderr, daemon=True).start()
        self.base, self.port, self.line = "", 0, ""

    def wait_ready(self) -> "Server":
        line = self.proc.stdout.readline()  # blocks until the model is loaded (or the process fails)
        m = re.search(r"(http://127\.0\.0\.1:(\d+))/v1", line)
        if m is None:
            self.proc.wait(30)
            raise RuntimeError(f"serve did not start: {line!r} {''.join(self.err)[-2000:]}")
        self.base, self.port, self.line = m.group(1), int(m.group(2)), line
        self.slots = int(re.search(r"(\d+) parallel", line).group(1))
        return self

    def _drain_stderr(self) -> None:
        for line in self.proc.stderr:
            self.err.append(line)

    def request(self, method: str, path: str, body: bytes | str | None = None, key: str | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        h = {"Content-Type": "application/json", **(headers or {})}
        if key:
            h["Authorization"] = f"Bearer {key}"
        conn.request(method, path, body=body.encode() if isinstance(body, str) else body, headers=h)
        r = conn.getresponse()
        out = r.status, dict(r.getheaders()), r.read()
        conn.close()
        return out

    def metrics(self, key: str | None = KEY) -> dict[str, float]:
        """Every sample of /metrics by name (labels other than position dropped)."""
        status, _, body = self.request("GET", "/metrics", key=key)
        assert status == 200
        out: dict[str, float] = {}
        for family in text_string_to_metric_families(body.decode()):
            for s in family.samples:
                name = s.name + (f"[{s.labels['position']}]" if "position" in s.labels else "")
                if "status" in s.labels:
                    name += f"[{s.labels['route']} {s.labels['status']}]"
                out[name] = out.get(name, 0.0) + s.value
        return out

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


@pytest.fixture(scope="module")
def launched():
    s = Server("--method", "eagle3", "--no-guard", "--api-key", KEY, "--alias", ALIAS, "--ctx", str(CTX),
               "--threads", str(THREADS), "--queue", "8")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def server(launched, reference):
    """The main server, ready (the reference answers are computed while it loads)."""
    return launched.wait_ready()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key=KEY, max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def reference(smollm2_path, launched):
    """The greedy answers of a Session opened with the server's options: what the server must say."""
    from homespec.cli.options import RunArgs
    from homespec.session import Session, final
    from homespec.session.encode import encode_prompt
    from homespec.speculative.steps import Limits

    opts = RunArgs(method="eagle3", ctx=CTX, threads=THREADS).options()
    session = Session.open(opts)
    try:
        tok = session.backend.tokenizer
        chat_ids = encode_prompt(tok, [QUESTION], chat=True)
        text_ids = tok.encode(TEXT_PROMPT, add_bos=True)
        chat = final(session.stream(chat_ids, limits=Limits(max_tokens=16)))
        text = final(session.stream(text_ids, limits=Limits(max_tokens=8)))
    finally:
        session.close()
    return {"chat": chat, "text": text}


def _ask(client, **kw):
    kw.setdefault("temperature", 0)
    return client.chat.completions.create(model=ALIAS, messages=[{"role": "user", "content": QUESTION}], **kw)


def test_chat_completion_is_the_greedy_answer(client, reference):
    r = _ask(client, max_tokens=16)
    ref = reference["chat"]
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-") and r.model == ALIAS
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content == ref.text
    assert r.choices[0].finish_reason == "length"
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (len(ref.prompt_token_ids), 16)
    assert r.usage.total_tokens == r.usage.prompt_tokens + 16
    timings, figures = r.model_extra["timings"], r.model_extra["homespec"]
    assert timings["cache_n"] + timings["prompt_n"] == len(ref.prompt_token_ids) and timings["predicted_n"] == 16
    assert r.usage.prompt_tokens_details.cached_tokens == timings["cache_n"]
    assert timings["draft_n"] > 0 and 0 <= timings["draft_n_accepted"] <= timings["draft_n"]
    assert figures["target_passes"] == ref.target_passes and figures["tokens_per_target_pass"] >= 1


def test_streamed_chat_joins_to_the_same_answer(client, reference):
    chunks = list(_ask(client, max_tokens=16, stream=True, stream_options={"include_usage": True}))
    assert all(c.object == "chat.completion.chunk" for c in chunks) and len({c.id for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == reference["chat"].text
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 16


def test_the_stream_ends_with_done(server):
    body = json.dumps({"messages": [{"role": "user", "content": QUESTION}], "max_tokens": 4, "temperature": 0,
                       "stream": True})
    status, headers, raw = server.request("POST", "/v1/chat/completions", body, key=KEY)
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    events = [e for e in raw.decode().split("\n\n") if e.strip()]
    assert events[-1] == "data: [DONE]" and all(e.startswith("data: ") for e in events)


def test_text_completion_is_the_greedy_answer(client, reference):
    r = client.completions.create(model=ALIAS, prompt=TEXT_PROMPT, max_tokens=8, temperature=0)
    assert r.object == "text_completion" and r.choices[0].text == reference["text"].text
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 8
    chunks = list(client.completions.create(model=ALIAS, prompt=TEXT_PROMPT, max_tokens=8, temperature=0,
                                            stream=True))
    assert "".join(c.choices[0].text for c in chunks) == reference["text"].text
    assert [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason] == ["length"]


def test_a_stop_string_ends_the_answer_before_it(client, reference):
    ref = reference["chat"].text
    word = ref.split()[1]  # the answer's second word
    r = _ask(client, max_tokens=16, stop=[word])
    assert r.choices[0].message.content == ref[:ref.index(word)] and r.choices[0].finish_reason == "stop"


def test_a_sampled_answer_is_reproduced_by_its_seed(client):
    a, b = (_ask(client, max_tokens=8, temperature=0.9, top_p=0.95, seed=7).choices[0].message.content
            for _ in range(2))
    assert a == b and a


def test_a_browser_page_on_this_machine_may_call_the_api_another_site_may_not(server):
    """CORS: the preflight (which carries no key) is answered before the key is asked for; pages
    from localhost get the allow header, another site's page does not (no --cors given)."""
    ask = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization, content-type"}
    status, headers, _ = server.request("OPTIONS", "/v1/chat/completions",
                                        headers={"Origin": "http://localhost:3000", **ask})
    assert status == 200 and headers["access-control-allow-origin"] == "http://localhost:3000"
    assert "POST" in headers["access-control-allow-methods"]
    status, headers, _ = server.request("OPTIONS", "/v1/chat/completions",
                                        headers={"Origin": "https://elsewhere.example", **ask})
    assert status == 400 and "access-control-allow-origin" not in headers
    status, headers, _ = server.request("GET", "/v1/models", key=KEY, headers={"Origin": "http://127.0.0.1:8000"})
    assert status == 200 and headers["access-control-allow-origin"] == "http://127.0.0.1:8000"
    status, headers, _ = server.request("GET", "/v1/models", headers={"Origin": "http://[::1]:5173"})
    assert status == 401 and headers["access-control-allow-origin"] == "http://[::1]:5173"  # the page may read why
    status, headers, _ = server.request("GET", "/v1/models", key=KEY, headers={"Origin": "https://elsewhere.example"})
    assert status == 200 and "access-control-allow-origin" not in headers


def test_models_lists_the_alias(client):
    models = client.models.list().data
    assert [m.id for m in models] == [ALIAS] and models[0].object == "model"
    assert client.models.retrieve(ALIAS).id == ALIAS


def test_a_wrong_or_missing_key_is_refused_but_health_needs_none(server):
    bad = openai.OpenAI(base_url=server.base + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    status, _, body = server.request("GET", "/v1/models")  # no key at all
    err = json.loads(body)["error"]
    assert status == 401 and set(err) == {"message", "type", "param", "code"} and err["code"] == "invalid_api_key"
    assert server.request("GET", "/metrics")[0] == 401
    status, _, body = server.request("GET", "/health")
    assert status == 200 and json.loads(body) == {"status": "ok"}


def _chat_body(content: str = "hi", **fields) -> str:
    return json.dumps({"model": ALIAS, "messages": [{"role": "user", "content": content}], **fields})


# SmolLM2's greedy answer to this runs past 300 tokens (to "hi": 10), so a client that leaves as
# soon as the request runs always leaves before its answer is whole.
LONG_ASK = "Write a long story about a lighthouse keeper, at least 600 words."


BAD_BODIES = {
    "malformed JSON": ('{"messages": [', 400, None),
    "not an object": ("[1, 2]", 400, None),
    "empty messages": (json.dumps({"messages": []}), 400, "messages"),
    "no messages": (json.dumps({"model": ALIAS}), 400, "messages"),
    "wrong type": (_chat_body(max_tokens="5"), 400, "max_tokens"),
    "wrong role": (json.dumps({"messages": [{"role": "wizard", "content": "hi"}]}), 400, "messages.0.role"),
    "n=2": (_chat_body(n=2), 400, "n"),
    "temperature out of range": (_chat_body(temperature=5), 400, "temperature"),
    "max_tokens beyond the context": (_chat_body(max_tokens=CTX), 400, "max_tokens"),
    "prompt longer than the context": (json.dumps({"messages": [{"role": "user", "content": "hello " * CTX}]}),
                                       400, "messages"),
}


@pytest.mark.parametrize("case", list(BAD_BODIES))
def test_a_bad_body_is_400_in_openais_shape(server, case):
    body, want, param = BAD_BODIES[case]
    status, _, raw = server.request("POST", "/v1/chat/completions", body, key=KEY)
    err = json.loads(raw)["error"]
    assert status == want and set(err) == {"message", "type", "param", "code"}
    assert err["type"] == "invalid_request_error" and err["param"] == param and err["message"]


def test_the_client_sees_a_bad_request_as_such(client):
    with pytest.raises(openai.BadRequestError, match="one choice"):
        _ask(client, max_tokens=4, n=2)
    with pytest.raises(openai.BadRequestError, match="context"):
        client.completions.create(model=ALIAS, prompt="word " * CTX, max_tokens=4)
    with pytest.raises(openai.BadRequestError, match="vocabulary"):
        client.completions.create(model=ALIAS, prompt=[1, 10**9], max_tokens=4)


def test_an_oversized_body_is_413_and_the_server_keeps_serving(server, client):
    big = _chat_body(padding="x" * (9 << 20))
    status, _, raw = server.request("POST", "/v1/chat/completions", big, key=KEY)
    assert status == 413 and json.loads(raw)["error"]["code"] == "body_too_large"
    assert _ask(client, max_tokens=2).choices[0].finish_reason == "length"
    assert any("-> 413" in line for line in server.err)  # one log line per refusal


def _idle(server, wait_s: float = 60.0) -> dict[str, float]:
    """/metrics once nothing runs (cancelled answers end at the engine's next step)."""
    deadline = time.monotonic() + wait_s
    while True:
        m = server.metrics()
        if m["homespec:num_requests_running"] == 0 or time.monotonic() > deadline:
            return m
        time.sleep(0.1)


def test_metrics_parse_and_count(server, client):
    before = _idle(server)
    _ask(client, max_tokens=8)
    after = _idle(server)
    assert after["homespec:request_success_total"] == before["homespec:request_success_total"] + 1
    assert after["homespec:generation_tokens_total"] == before["homespec:generation_tokens_total"] + 8
    assert after["homespec:spec_decode_num_drafts_total"] > before["homespec:spec_decode_num_drafts_total"]
    drafted = after["homespec:spec_decode_num_draft_tokens_total"]
    accepted = after["homespec:spec_decode_num_accepted_tokens_total"]
    per_pos = [v for k, v in sorted(after.items()) if k.startswith("homespec:spec_decode_num_accepted_tokens_per_pos")]
    assert 0 <= accepted <= drafted and sum(per_pos) == accepted
    assert all(a >= b for a, b in zip(per_pos, per_pos[1:]))  # a position is reached only through the one before
    # --parallel left out: the plan's 4 slots (SmolLM2's KV for 4 x 512 tokens fits anywhere)
    assert after["homespec:num_slots"] == server.slots == 4 and after["homespec:num_requests_waiting"] == 0
    assert after["homespec:http_requests_total[/v1/chat/completions 200]"] >= 1


def test_clients_that_leave_mid_stream_leak_no_sequence(server, client):
    before = _idle(server)
    for _ in range(3):
        stream = client.chat.completions.create(model=ALIAS, messages=[{"role": "user", "content": "Tell a story."}],
                                                max_tokens=300, temperature=0, stream=True)
        for n, _chunk in enumerate(stream):
            if n == 2:
                break
        stream.close()  # the client goes away mid-answer
    assert _ask(client, max_tokens=4).choices[0].finish_reason == "length"
    after = _idle(server)
    assert after["homespec:request_cancelled_total"] == before["homespec:request_cancelled_total"] + 3
    assert after["homespec:num_requests_running"] == 0 and after["homespec:live_sequences"] == 0
    assert after["homespec:generation_tokens_total"] - before["homespec:generation_tokens_total"] < 3 * 300


def test_a_client_that_leaves_before_a_whole_answer_cancels_it(server):
    import socket

    before = _idle(server)
    body = _chat_body(LONG_ASK, max_tokens=300, temperature=0).encode()
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     + f"Authorization: Bearer {KEY}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        deadline = time.monotonic() + 60
        while server.metrics()["homespec:num_requests_running"] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
    after = _idle(server)  # closed before the answer came: cancelled at the engine's next step
    assert after["homespec:request_cancelled_total"] == before["homespec:request_cancelled_total"] + 1
    assert after["homespec:live_sequences"] == 0


def test_a_bounded_load_from_four_threads_all_answered(server, client, reference):
    """12 requests from 4 threads at once: each answered, each greedy answer the same."""
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _: _ask(client, max_tokens=6).choices[0].message.content, range(12)))
    assert len(answers) == 12 and set(answers) == {answers[0]}
    assert reference["chat"].text.startswith(answers[0])
    m = _idle(server)
    assert m["homespec:num_requests_waiting"] == 0 and m["homespec:live_sequences"] == 0


NEAR_TIE = 1.6  # logits: llama.cpp's batch-vs-single floor, as tests/engine/test_engine_batched.py uses it


@pytest.fixture(scope="module")
def test_prompts(smollm2_path):
    """Eight of homespec's test prompts (24-48 tokens in the chat template) as token ids."""
    from homespec.backends.llamacpp.backend import LlamaCppBackend
    from homespec.backends.settings import BackendSettings
    from homespec.promptsets import load_prompts
    from homespec.session.encode import encode_prompt

    with LlamaCppBackend(smollm2_path, BackendSettings(n_ctx=CTX, n_threads=1)) as b:
        ids = [encode_prompt(b.tokenizer, p.turns, True) for p in load_prompts("test")]
    return [p for p in ids if 24 <= len(p) <= 48][:8]


def _complete(client, ids, n=16) -> str:
    return client.completions.create(model=ALIAS, prompt=ids, max_tokens=n, temperature=0).choices[0].text


def test_eight_concurrent_greedy_answers_equal_each_sent_alone(server, client, test_prompts, smollm2_path):
    """8 requests at once over HTTP (4 decoded together, 4 waiting and joining) answer as each does alone,
    within llama.cpp's batch-vs-single floor: an answer may part only where the target's top two logits
    are a near-tie (the first parted token, scored alone, decides)."""
    alone = [_complete(client, p) for p in test_prompts]
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(lambda p: _complete(client, p), test_prompts))
    same = sum(a == t for a, t in zip(alone, together))
    print(f"identical answers: {same} of {len(alone)}")
    assert same >= 6
    if same < len(alone):
        from homespec.backends.llamacpp.backend import LlamaCppBackend
        from homespec.backends.settings import BackendSettings

        with LlamaCppBackend(smollm2_path, BackendSettings(n_ctx=CTX, n_ubatch=32, n_threads=1)) as b:
            for p, a, t in zip(test_prompts, alone, together):
                if a != t:
                    r = b.tokenizer.encode(a, add_bos=False)
                    k = next(i for i in range(len(r)) if not t.startswith(b.tokenizer.decode(r[:i + 1])))
                    top2 = np.sort(b.score(list(p) + r[:k])[-1])[::-1][:2]
                    assert float(top2[0] - top2[1]) < NEAR_TIE, f"answers part at token {k}, not a near-tie"
    assert _idle(server)["homespec:live_sequences"] == 0


def test_a_second_server_on_a_port_in_use_fails_in_one_line(server):
    r = subprocess.run([sys.executable, "-m", "homespec", "serve", "--port", str(server.port)], cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert lines[0].startswith("error: port") and "in use" in lines[0] and lines[1].startswith("hint: ")


@pytest.fixture(scope="module")
def small():
    """A plain server with one waiting place: easy to fill."""
    s = Server("--method", "none", "--no-guard", "--parallel", "1", "--queue", "1", "--ctx", "256",
               "--threads", "1", "--cors", "https://chat.example.org").wait_ready()
    yield s
    s.stop()


def _stream_in_background(s: Server, started: threading.Event, leave: threading.Event | None = None):
    """A long streamed answer read on a thread; `started` once text flows; it leaves when `leave` is set."""
    def run():
        c = openai.OpenAI(base_url=s.base + "/v1", api_key="any", max_retries=0, timeout=120)
        try:
            with c.chat.completions.create(model="x", messages=[{"role": "user", "content": "Tell a long story."}],
                                           max_tokens=200, temperature=0, stream=True) as stream:
                for _ in stream:
                    started.set()
                    if leave is not None and leave.is_set():
                        break
        except openai.APIError:  # the server going away under test_sigterm
            pass
        finally:
            started.set()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_cors_lets_the_named_site_in_beside_this_machine(small):
    ask = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type, x-stainless-os"}
    for origin in ("https://chat.example.org", "http://localhost:8080"):
        status, headers, _ = small.request("OPTIONS", "/v1/chat/completions", headers={"Origin": origin, **ask})
        assert status == 200 and headers["access-control-allow-origin"] == origin
        assert "x-stainless-os" in headers["access-control-allow-headers"].lower()  # the OpenAI JS client's own
    status, headers, _ = small.request("OPTIONS", "/v1/chat/completions",
                                       headers={"Origin": "https://chat.example.org.evil.example", **ask})
    assert status == 400 and "access-control-allow-origin" not in headers


def test_a_full_queue_answers_503_with_retry_after(small):
    running, waiting, leave = threading.Event(), threading.Event(), threading.Event()
    first = _stream_in_background(small, running, leave)
    assert running.wait(60)
    second = _stream_in_background(small, waiting, leave)  # takes the one waiting place
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # one answer decoding, one waiting
        m = small.metrics(key=None)
        if m["homespec:num_requests_running"] >= 1 and m["homespec:num_requests_waiting"] >= 1:
            break
        time.sleep(0.05)
    status, headers, raw = small.request("POST", "/v1/chat/completions", _chat_body(max_tokens=4))
    assert status == 503 and int(headers["retry-after"]) >= 1
    assert json.loads(raw)["error"]["code"] == "server_busy"
    leave.set()  # both clients go away: the running answer is cancelled, then the waiting one
    first.join(120)
    second.join(120)
    deadline = time.monotonic() + 60
    while (m := small.metrics(key=None))["homespec:request_cancelled_total"] < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert m["homespec:request_cancelled_total"] == 2 and m["homespec:live_sequences"] == 0
    assert m["homespec:http_requests_total[/v1/chat/completions 503]"] == 1


def test_sigterm_stops_the_server_with_exit_0(small):
    running = threading.Event()
    client_thread = _stream_in_background(small, running)
    assert running.wait(60)
    small.proc.send_signal(signal.SIGTERM)
    code = small.proc.wait(60)  # the bound: running answers get 10 s, the engine 5 s more
    client_thread.join(30)
    assert code == 0, "".join(small.err)[-2000:]
    assert any("SIGTERM" in line for line in small.err)


def test_a_conversation_reuses_its_slot_and_slots_and_metrics_say_so(client, server):
    """The second turn carries the first turn and its answer: the slot's cache holds them, so only
    the new message is processed (timings.cache_n, as llama-server); cache_prompt: false opts out."""
    msgs = [{"role": "user", "content": "Name a colour."}]
    first = client.chat.completions.create(model=ALIAS, messages=msgs, max_tokens=8, temperature=0)
    msgs += [{"role": "assistant", "content": first.choices[0].message.content},
             {"role": "user", "content": "And another one?"}]
    second = client.chat.completions.create(model=ALIAS, messages=msgs, max_tokens=8, temperature=0)
    t = second.model_extra["timings"]
    assert t["cache_n"] >= first.usage.prompt_tokens and t["prompt_n"] < 30
    fresh = client.chat.completions.create(model=ALIAS, messages=msgs, max_tokens=8, temperature=0,
                                           extra_body={"cache_prompt": False})
    assert fresh.model_extra["timings"]["cache_n"] == 0
    assert fresh.choices[0].message.content == second.choices[0].message.content
    status, _, body = server.request("GET", "/slots", key=KEY)
    slots = json.loads(body)
    assert status == 200 and len(slots) >= 1 and all(not s["is_processing"] for s in slots)
    assert max(s["n_cached"] for s in slots) > 0
    m = server.metrics()
    assert m["homespec:prompt_tokens_reused_total"] >= t["cache_n"]
    assert m["homespec:prompt_tokens_reused_total"] + m["homespec:prompt_tokens_processed_total"] == \
        m["homespec:prompt_tokens_total"]
