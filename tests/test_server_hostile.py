"""`homespec serve` against hostile requests: a real server on 127.0.0.1 (the embedded SmolLM2,
plain decoding, 4 slots), the official openai client and raw HTTP. Requests inside the documented
ranges never fail their neighbours; malformed bodies are OpenAI-shaped 400s with their code."""

from __future__ import annotations

import http.client
import json
import select
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

openai = pytest.importorskip("openai")
from test_server import Server  # noqa: E402 - the subprocess server of tests/test_server.py

pytestmark = pytest.mark.slow
KEY = "k1"
LONG = 64


@pytest.fixture(scope="module")
def server():
    s = Server("--method", "none", "--parallel", "4", "--queue", "8", "--ctx", "256", "--threads", "1",
               "--api-key", KEY).wait_ready()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key=KEY, max_retries=0, timeout=120)


def _ask(client, **kw):
    return client.chat.completions.create(model="x", messages=[{"role": "user", "content": "Tell me about the sea."}],
                                          **kw)


def _running(server, n: int, wait_s: float = 60) -> None:
    deadline = time.monotonic() + wait_s
    while server.metrics(key=KEY)["homespec:num_requests_running"] < n:
        assert time.monotonic() < deadline
        time.sleep(0.02)


HOSTILE = [dict(temperature=1e-300), dict(temperature=1.0, top_p=1e-300), dict(temperature=5e-324, top_p=5e-324),
           dict(temperature=2, seed=2**63 - 1), dict(temperature=0.7, seed=-(2**63))]


def test_innocent_requests_succeed_beside_hostile_ones(server, client):
    with ThreadPoolExecutor(2) as pool:
        innocent = [pool.submit(_ask, client, max_tokens=LONG, temperature=0) for _ in range(2)]
        _running(server, 2)
        for kw in HOSTILE:  # inside the documented ranges: each is answered, none fails its batch
            r = _ask(client, max_tokens=4, **kw)
            assert r.choices[0].finish_reason in ("length", "stop"), kw
        with pytest.raises(openai.BadRequestError, match="seed"):  # outside OpenAI's range: refused alone
            _ask(client, max_tokens=4, seed=2**64)
        for f in innocent:
            r = f.result(120)
            assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == LONG
    assert server.request("GET", "/health")[0] == 200


def _post(server, body: bytes, content_type: str = "application/json") -> tuple[int, dict]:
    status, _, raw = server.request("POST", "/v1/chat/completions", body, key=KEY,
                                    headers={"Content-Type": content_type})
    return status, json.loads(raw)


@pytest.mark.parametrize("body, words", [
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}', "not UTF-8"),
    (b'{"messages": [', "not valid JSON"),
])
def test_unreadable_json_is_invalid_json(server, body, words):
    status, out = _post(server, body)
    assert status == 400 and out["error"]["code"] == "invalid_json" and words in out["error"]["message"]
    assert set(out["error"]) == {"message", "type", "param", "code"}


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", ""])
def test_a_json_body_is_read_whatever_its_content_type(server, content_type):
    body = json.dumps({"model": "x", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}).encode()
    status, out = _post(server, body, content_type)
    assert status == 200 and out["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize("message, param, words", [
    ({"role": "user", "content": None}, "messages.0.content", "null is only allowed"),
    ({"role": "user"}, "messages.0.content", "required"),
    ({"role": "system", "content": None}, "messages.0.content", "null is only allowed"),
    ({"role": "user", "content": "\ud800"}, "messages.0.content", "lone surrogate"),
    ({"role": "user", "content": [{"type": "text", "text": "a\udfffb"}]}, "messages.0.content", "lone surrogate"),
])
def test_a_message_must_carry_readable_content(server, message, param, words):
    status, out = _post(server, json.dumps({"messages": [message]}).encode())
    assert status == 400 and out["error"]["param"] == param and words in out["error"]["message"], out


@pytest.mark.parametrize("field, value", [("temperature", "NaN"), ("top_p", "Infinity"), ("temperature", "-Infinity"),
                                          ("max_tokens", str(2**70)), ("top_k", str(2**40)), ("seed", str(-(2**63) - 1))])
def test_numbers_outside_their_range_are_400(server, field, value):
    body = '{"messages": [{"role": "user", "content": "Hi"}], "%s": %s}' % (field, value)
    status, out = _post(server, body.encode())
    assert status == 400 and out["error"]["param"] == field and out["error"]["code"] == "invalid_value", out


def test_the_start_line_does_not_show_the_key_as_a_flag(server):
    assert server.line and "api_key=<your --api-key>" in server.line and KEY not in server.line


@pytest.fixture(scope="module")
def one_slot():
    s = Server("--method", "none", "--parallel", "1", "--queue", "2", "--ctx", "256", "--threads", "1").wait_ready()
    yield s
    s.stop()


def _raw_stream(port: int) -> socket.socket:
    body = json.dumps({"model": "x", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4,
                       "stream": True}).encode()
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    return s


def _read_for(s: socket.socket, seconds: float) -> bytes:
    out, deadline = b"", time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if select.select([s], [], [], left)[0]:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
    return out


def test_a_queued_stream_sends_no_chunk_before_its_turn(one_slot):
    leave = threading.Event()

    def long_answer() -> None:
        c = openai.OpenAI(base_url=one_slot.base + "/v1", api_key="any", max_retries=0, timeout=120)
        with c.chat.completions.create(model="x", messages=[{"role": "user", "content": "Tell a long story."}],
                                       max_tokens=200, temperature=0, stream=True) as stream:
            for _ in stream:
                if leave.is_set():
                    break

    first = threading.Thread(target=long_answer, daemon=True)
    first.start()
    deadline = time.monotonic() + 60
    while one_slot.metrics(key=None)["homespec:num_requests_running"] < 1:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    s = _raw_stream(one_slot.port)
    try:
        waiting = _read_for(s, 1.5)
        assert one_slot.metrics(key=None)["homespec:num_requests_waiting"] == 1
        assert b"data:" not in waiting  # no role chunk while it waits: a client would time its first token from it
        leave.set()  # the first client leaves: the queued request runs
        first.join(60)
        rest = _read_for(s, 30)
        events = [line for line in (waiting + rest).split(b"\n") if line.startswith(b"data: ")]
        assert json.loads(events[0][6:])["choices"][0]["delta"]["role"] == "assistant"
        assert events[-1] == b"data: [DONE]"
    finally:
        s.close()
    deadline = time.monotonic() + 10
    while not any("cancelled: the client left" in line for line in one_slot.err):  # the first client's leaving
        assert time.monotonic() < deadline, "".join(one_slot.err)[-2000:]
        time.sleep(0.05)
