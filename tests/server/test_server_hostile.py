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
from test_server import ROOT, Server  # noqa: E402 - the subprocess server of tests/server/test_server.py

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
    first = threading.Thread(target=_hold_stream, args=(one_slot, leave, 120), daemon=True)
    first.start()
    deadline = time.monotonic() + 60
    while one_slot.metrics(key=None)["homespec:num_requests_running"] < 1:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    s = _raw_stream(one_slot.port)
    try:
        deadline = time.monotonic() + 30
        while one_slot.metrics(key=None)["homespec:num_requests_waiting"] < 1:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        waiting = _read_for(s, 0.3)  # while it waits (the first answer's 200 tokens outlast this on any CPU)
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


# --- the classes of a hostile new user's second pass: each test names its class --------------------------
# 2: the GBNF grammar field, 3: forced calls of tools with $defs, 4: a schema too large for everyone,
# 5: shutdown with streams in flight, 6: request-shaped mistakes, 7: queue accounting and slow bodies.

def _chat(server, body: dict, key: str | None = KEY) -> tuple[int, dict]:
    status, _, raw = server.request("POST", "/v1/chat/completions", json.dumps(body), key=key)
    return status, json.loads(raw)


def _ask_body(**kw) -> dict:
    return {"model": "x", "messages": [{"role": "user", "content": "Is the sea blue? Answer yes or no."}],
            "max_tokens": 8, "temperature": 0, **kw}


@pytest.mark.parametrize("gbnf, pattern", [('root ::= "yes" | "no"', r"(yes|no)"),
                                           ("root ::= [0-9]+", r"[0-9]+"),
                                           ('root ::= answer "."\nanswer ::= "Yes" | "No"', r"(Yes|No)\.")])
def test_class2_a_gbnf_grammar_constrains_the_answer(server, gbnf, pattern):
    import re

    status, out = _chat(server, _ask_body(grammar=gbnf))
    assert status == 200, out
    assert re.fullmatch(pattern, out["choices"][0]["message"]["content"]), out


@pytest.mark.parametrize("gbnf, words", [("root ::= (", "cannot be read"), ('start ::= "a"', "root"),
                                         ('root ::= foo', "foo")])
def test_class2_a_malformed_gbnf_grammar_is_the_grammars_400(server, gbnf, words):
    status, out = _chat(server, _ask_body(grammar=gbnf))
    assert status == 400 and out["error"]["param"] == "grammar" and words in out["error"]["message"], out
    assert "module" not in out["error"]["message"]


@pytest.fixture(scope="module")
def tooled():
    template = ROOT / "homespec" / "data" / "templates" / "chatml-tools.jinja"
    s = Server("--method", "none", "--parallel", "2", "--ctx", "1024", "--threads", "1",
               "--chat-template-file", str(template)).wait_ready()
    yield s
    s.stop()


def _pydantic_tools():
    from pydantic import BaseModel

    class Loc(BaseModel):
        city: str
        country: str

    class GetWeather(BaseModel):
        """The weather at a place."""
        location: Loc
        unit: str = "celsius"

    class Node(BaseModel):
        label: str
        children: list["Node"] = []

    class Outline(BaseModel):
        """An outline of nested headings."""
        root: Node

    return GetWeather, Outline


@pytest.mark.parametrize("which", [0, 1])
def test_class3_a_forced_call_of_a_pydantic_tool_with_defs_is_valid(tooled, which):
    """openai.pydantic_function_tool writes nested models as $defs and #/$defs/... references; a
    forced call wraps the parameters in the call's own schema, where they must still resolve."""
    models = _pydantic_tools()
    tools = [openai.pydantic_function_tool(m) for m in models]
    assert all("$defs" in t["function"]["parameters"] for t in tools)
    c = openai.OpenAI(base_url=tooled.base + "/v1", api_key="any", max_retries=0, timeout=120)
    name = models[which].__name__
    r = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "Weather in Paris, France?"}],
                                  tools=tools, tool_choice={"type": "function", "function": {"name": name}},
                                  parallel_tool_calls=False, temperature=0, max_tokens=120, logprobs=True)
    choice = r.choices[0]
    if choice.finish_reason == "tool_calls":  # ended on its own: one call, whose arguments validate
        (call,) = choice.message.tool_calls
        assert call.function.name == name
        models[which].model_validate_json(call.function.arguments)
    else:  # the tiny model nests Outline's Node without end: #/$defs/Node resolved, level after level.
        # A call cut by max_tokens is not released (neither as a call nor as text): its tokens are in logprobs
        assert choice.finish_reason == "length" and not choice.message.tool_calls, choice
        text = "".join(t.token for t in choice.logprobs.content)
        assert text.count('"children"') >= 2, text


def test_class3_two_tools_with_the_same_def_name_each_keep_their_own(tooled):
    a = {"type": "function", "function": {"name": "a", "parameters": {
        "type": "object", "properties": {"x": {"$ref": "#/$defs/T"}}, "required": ["x"],
        "$defs": {"T": {"type": "integer"}}}}}
    b = {"type": "function", "function": {"name": "b", "parameters": {
        "type": "object", "properties": {"x": {"$ref": "#/$defs/T"}}, "required": ["x"],
        "$defs": {"T": {"type": "string", "enum": ["on", "off"]}}}}}
    status, out = _chat(tooled, {"messages": [{"role": "user", "content": "Turn it on."}], "tools": [a, b],
                                 "tool_choice": "required", "parallel_tool_calls": False, "temperature": 0,
                                 "max_tokens": 60}, key=None)
    assert status == 200, out
    (call,) = out["choices"][0]["message"]["tool_calls"]
    x = json.loads(call["function"]["arguments"])["x"]
    assert (call["function"]["name"], type(x)) in (("a", int), ("b", str)) and (x in ("on", "off")) == isinstance(x, str)


def _huge_schema(n: int, required: bool) -> dict:
    props = {f"p{i}": {"type": "integer"} for i in range(n)}
    return {"type": "object", "properties": props, **({"required": list(props)} if required else {})}


@pytest.mark.parametrize("schema, field", [(_huge_schema(10_000, False), "response_format"),
                                           (_huge_schema(6_000, False), "json_schema")])
def test_class4_a_schema_too_large_to_compile_in_time_is_a_400_and_stalls_no_one(server, schema, field):
    body = _ask_body(**({"response_format": {"type": "json_schema", "json_schema": {"name": "big", "schema": schema}}}
                        if field == "response_format" else {"json_schema": schema}))
    with ThreadPoolExecutor(2) as pool:
        big = pool.submit(_chat, server, body)
        innocent = pool.submit(_chat, server, _ask_body(max_tokens=4))
        status, out = big.result(120)
        assert status == 400 and out["error"]["param"] == field and "optional properties" in out["error"]["message"]
        status, out = innocent.result(120)
        assert status == 200 and out["choices"][0]["finish_reason"] in ("length", "stop")


def test_class4_a_large_schema_compiles_beside_innocent_requests(server):
    """3,000 required properties compile (a second) on the compiler's thread, not the engine's: the
    requests beside it are answered meanwhile (their times: benchmarks/suites/grammar_stall.py)."""
    body = _ask_body(max_tokens=6, response_format={"type": "json_schema", "json_schema": {
        "name": "form", "schema": _huge_schema(3_000, True)}})
    with ThreadPoolExecutor(3) as pool:
        big = pool.submit(_chat, server, body)
        innocents = [pool.submit(_chat, server, _ask_body(max_tokens=4)) for _ in range(2)]
        for f in innocents:
            status, out = f.result(120)
            assert status == 200
        status, out = big.result(300)
        assert status == 200 and out["choices"][0]["message"]["content"].startswith("{"), out


@pytest.mark.parametrize("body, param, words", [
    (_ask_body(tool_choice="required"), "tool_choice", "only allowed when tools are given"),
    (_ask_body(tool_choice={"type": "function", "function": {"name": "f"}}), "tool_choice", "only allowed"),
    (_ask_body(grammar='root ::= "a"', response_format={"type": "json_object"}), "grammar", "send one of them"),
    (_ask_body(grammar='root ::= "a"', json_schema={"type": "string"}), "grammar", "send one of them"),
    (_ask_body(response_format={"type": "json_schema", "json_schema": {"name": "self", "schema": {"$ref": "#"}}}),
     "response_format", "matches nothing"),
    (_ask_body(json_schema={"anyOf": [{"$ref": "#"}]}), "json_schema", "matches nothing"),
    (_ask_body(stop=[f"s{i}" for i in range(17)]), "stop", "at most 16 stop strings, got 17"),
    (_ask_body(stop=["x"] * 100), "stop", "got 100"),
])
def test_class6_request_shaped_mistakes_are_400s_that_say_what(server, body, param, words):
    status, out = _chat(server, body)
    assert status == 400 and out["error"]["param"] == param and words in out["error"]["message"], out


@pytest.mark.parametrize("content", ["\ud800", "ok \udfff then"])
def test_class6_tokenize_with_a_lone_surrogate_is_a_400(server, content):
    status, _, raw = server.request("POST", "/tokenize", json.dumps({"content": content}), key=KEY)
    out = json.loads(raw)
    assert status == 400 and out["error"]["param"] == "content" and "lone surrogate" in out["error"]["message"]


@pytest.mark.parametrize("n", [70_000, 1_500_000])
def test_class6_detokenize_beyond_the_context_is_a_400_at_once(server, n):
    status, _, raw = server.request("POST", "/detokenize", json.dumps({"tokens": [42] * n}), key=KEY)
    out = json.loads(raw)
    assert status == 400 and out["error"]["param"] == "tokens" and "at most 65,536" in out["error"]["message"]
    text = "#" * 64 + " and " + "-" * 44  # pieces of SmolLM2's vocabulary longer than 32 bytes
    ids = json.loads(server.request("POST", "/tokenize", json.dumps({"content": text}), key=KEY)[2])["tokens"]
    status, _, raw = server.request("POST", "/detokenize", json.dumps({"tokens": ids * (30_000 // len(ids))}), key=KEY)
    assert status == 200 and json.loads(raw)["content"] == text * (30_000 // len(ids))  # every piece kept


def test_class7_clients_that_leave_the_queue_free_their_places(one_slot):
    """--queue 2: a stream holds the slot; two queued clients leave; two new ones then queue
    (no phantom places, no 503), and the server is free once the first leaves."""
    leave = threading.Event()
    holder = threading.Thread(target=_hold_stream, args=(one_slot, leave), daemon=True)
    holder.start()
    _wait_metric(one_slot, "homespec:num_requests_running", 1)
    for _ in range(3):  # each round fills the queue and leaves it
        socks = [_raw_stream(one_slot.port) for _ in range(2)]
        _wait_metric(one_slot, "homespec:num_requests_waiting", 2)
        for s in socks:
            s.close()
        _wait_metric(one_slot, "homespec:num_requests_waiting", 0, at_most=True)
    socks = [_raw_stream(one_slot.port) for _ in range(2)]
    try:
        _wait_metric(one_slot, "homespec:num_requests_waiting", 2)
        status, _, raw = one_slot.request("POST", "/v1/chat/completions", json.dumps(_ask_body(max_tokens=2)))
        assert status == 503 and "busy" in json.loads(raw)["error"]["message"]  # really full now: 1 + 2
    finally:
        for s in socks:
            s.close()
        leave.set()
        holder.join(60)
    _wait_metric(one_slot, "homespec:num_requests_running", 0, at_most=True)
    status, _, _ = one_slot.request("POST", "/v1/chat/completions", json.dumps(_ask_body(max_tokens=2)))
    assert status == 200


def _hold_stream(server, leave: threading.Event, timeout: float = 300) -> None:
    """A long greedy answer streamed from `server` until `leave` is set (its slot held meanwhile)."""
    c = openai.OpenAI(base_url=server.base + "/v1", api_key="any", max_retries=0, timeout=timeout)
    with c.chat.completions.create(model="x", messages=[{"role": "user", "content": "Tell a long story."}],
                                   max_tokens=200, temperature=0, stream=True) as stream:
        for _ in stream:
            if leave.is_set():
                break


def _wait_metric(server, name: str, value: float, at_most: bool = False, wait_s: float = 60) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        got = server.metrics(key=None)[name]
        if (got <= value) if at_most else (got >= value):
            return
        assert time.monotonic() < deadline, f"{name} = {got}"
        time.sleep(0.05)


@pytest.mark.parametrize("head, body", [
    (b"Content-Length: 200\r\n", b'{"messages": ['),  # short of its length
    (b"Transfer-Encoding: chunked\r\n", b"5\r\n{\"mes\r\n"),  # chunked without an end
])
def test_class7_a_body_that_stops_coming_is_a_408_and_the_connection_closes(one_slot, head, body):
    s = socket.create_connection(("127.0.0.1", one_slot.port))
    try:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + head +
                  b"\r\n" + body)
        got = _read_for(s, 20)  # the body deadline is 10 s without a piece; the server then closes
        s.settimeout(5)
        closed = s.recv(1) == b""
    finally:
        s.close()
    assert got.startswith(b"HTTP/1.1 408") and b"body_timeout" in got and closed, got[:300]


def _stream_events(server, path: str, body: dict, out: list, started: threading.Event) -> None:
    """POST `body` with stream on; every `data:` payload (and `event:` name) into `out`."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    conn.request("POST", path, json.dumps({**body, "stream": True}), {"Content-Type": "application/json"})
    r = conn.getresponse()
    out.append(("status", r.status))
    for raw in r:
        line = raw.decode().rstrip("\n")
        if line.startswith("data: ") or line.startswith("event: "):
            out.append(tuple(line.split(": ", 1)))
            started.set()
    conn.close()


LONG_ASK = {"model": "x", "max_tokens": 2000, "temperature": 0}
ROUTES = [("/v1/chat/completions", {**LONG_ASK, "messages": [{"role": "user", "content": "Tell a very long story."}]}),
          ("/v1/completions", {**LONG_ASK, "prompt": "Once upon a time, in a land far away,"}),
          ("/v1/responses", {"model": "x", "input": "Tell a very long story.", "max_output_tokens": 2000,
                             "temperature": 0})]


def _ended_cleanly(path: str, events: list) -> bool:
    """A stream's last events are its route's ending: an error event then [DONE] (chat and text
    completions), an error then response.failed (Responses)."""
    data = [v for k, v in events if k == "data"]
    if path == "/v1/responses":
        kinds = [v for k, v in events if k == "event"]
        return kinds[-2:] == ["error", "response.failed"] and json.loads(data[-1])["response"]["status"] == "failed"
    return data[-1] == "[DONE]" and json.loads(data[-2])["error"]["code"] == "shutting_down"


@pytest.mark.parametrize("signals", [("SIGTERM",), ("SIGINT", "SIGINT")])
def test_class5_a_shutdown_ends_every_stream_in_its_routes_shape(signals):
    """One signal: the answers get 10 s, then each ends with its route's error ending; a second
    signal ends them at once. Either way: exit 0, no traceback in the log."""
    import signal as sig

    s = Server("--method", "none", "--parallel", "2", "--ctx", "2048", "--threads", "1").wait_ready()
    try:
        runs = []
        for path, body in ROUTES * 2:  # 6 streams on 2 slots: 2 running, 4 waiting
            out, started = [], threading.Event()
            t = threading.Thread(target=_stream_events, args=(s, path, body, out, started), daemon=True)
            t.start()
            runs.append((path, out, started, t))
        _wait_metric(s, "homespec:num_requests_running", 2, wait_s=120)
        _wait_metric(s, "homespec:num_requests_waiting", 4, wait_s=120)
        for name in signals:
            s.proc.send_signal(getattr(sig, name))
            time.sleep(0.3)
        code = s.proc.wait(60)
        for path, out, _, t in runs:
            t.join(30)
            assert out[0] == ("status", 200) and _ended_cleanly(path, out[1:]), (path, out[-3:])
        log = "".join(s.err)
        assert code == 0 and "Traceback" not in log and "Exception in ASGI" not in log, log[-3000:]
        assert f"{signals[0]}: stopped" in log
    finally:
        s.stop()
