"""What 2026 clients call beyond plain chat, end to end on one real `homespec serve` (the embedded
SmolLM2, the shipped EAGLE head drafting on every step, the ChatML template with tools given by
--chat-template-file), through the official openai client: forced tool calls, structured output
with a pydantic model, log-probabilities, the Responses API, and llama-server's discovery routes."""

from __future__ import annotations

import json

import pytest

openai = pytest.importorskip("openai")
from pydantic import BaseModel  # noqa: E402
from test_server import ROOT, Server  # noqa: E402 - the subprocess server of tests/server/test_server.py

pytestmark = pytest.mark.slow
TEMPLATE = ROOT / "homespec" / "data" / "templates" / "chatml-tools.jinja"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "The time in a time zone",
                                         "parameters": {"type": "object", "properties": {"zone": {"type": "string"}},
                                                        "required": ["zone"]}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def server():
    s = Server("--no-guard", "--ctx", "1024", "--threads", "2", "--parallel", "2",
               "--chat-template-file", str(TEMPLATE)).wait_ready()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key="any", max_retries=0, timeout=120)


def test_a_required_call_is_a_valid_call(client):
    r = client.chat.completions.create(model="m", messages=ASK, tools=[WEATHER, TIME], tool_choice="required",
                                       parallel_tool_calls=False, temperature=0, max_tokens=60)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    args = json.loads(call.function.arguments)
    assert call.function.name in ("get_weather", "get_time") and call.id.startswith("call_")
    required = {"get_weather": {"city"}, "get_time": {"zone"}}[call.function.name]
    assert required <= set(args) and set(args) <= {"city", "unit", "zone"}


def test_a_named_call_streams_as_tool_call_deltas(client):
    """In the template's own format (hermes): the call's id and name first, then its arguments as
    they are written (this server drafts on two slots, so a second run of the request may decode
    other tokens: the pieces are checked against the whole answer in tests/chatformat/test_split.py
    and on a one-slot server in test_server_tool_stream.py)."""
    asked = {"model": "m", "messages": ASK, "tools": [WEATHER, TIME], "parallel_tool_calls": False,
             "tool_choice": {"type": "function", "function": {"name": "get_time"}}, "temperature": 0, "max_tokens": 60}
    chunks = list(client.chat.completions.create(**asked, stream=True))
    calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert calls[0].index == 0 and calls[0].function.name == "get_time" and calls[0].function.arguments == ""
    assert len(calls) > 2 and {c.index for c in calls} == {0} and [c.id for c in calls if c.id] == [calls[0].id]
    assert "zone" in json.loads("".join(c.function.arguments for c in calls))
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]


def test_a_tool_answer_is_rendered_back(server):
    """The assistant's call and the tool's answer go through the template (llama-server's
    /apply-template shows the prompt)."""
    messages = ASK + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "22 C, sunny"}]
    status, _, raw = server.request("POST", "/apply-template", json.dumps({"messages": messages, "tools": [WEATHER]}))
    prompt = json.loads(raw)["prompt"]
    assert status == 200 and '"name": "get_weather"' in prompt and "<tools>" in prompt
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in prompt
    assert "<tool_response>\n22 C, sunny\n</tool_response>" in prompt


class Person(BaseModel):
    name: str
    age: int
    city: str


def test_parse_with_a_pydantic_model_gets_the_model(client):
    r = client.chat.completions.parse(model="m", messages=[{"role": "user", "content": "Alice is 30 and lives in Paris."
                                                                                        " Describe her."}],
                                      response_format=Person, temperature=0, max_tokens=80)
    person = r.choices[0].message.parsed
    assert isinstance(person, Person) and r.choices[0].finish_reason == "stop"


def test_json_object_and_a_sampled_schema_answer_are_json(client):
    r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Bob is 7. Give his name "
                                                                                         "and age as JSON."}],
                                       response_format={"type": "json_object"}, temperature=0, max_tokens=60)
    assert r.choices[0].finish_reason == "stop" and isinstance(json.loads(r.choices[0].message.content), dict)
    schema = {"type": "object", "properties": {"fruit": {"type": "string", "enum": ["apple", "pear"]},
                                               "count": {"type": "integer"}}, "required": ["fruit", "count"],
              "additionalProperties": False}
    # Sampled at T=1, a few answers in a hundred spend max_tokens on the whitespace JSON allows
    # between its tokens (measured on this model: 3 of 64 seeds), so three fixed seeds: every answer
    # that ends is the schema's JSON, and at least one ends.
    ended = 0
    for seed in (3, 4, 5):
        r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Pick a fruit."}],
                                           response_format={"type": "json_schema", "json_schema": {"name": "pick",
                                                                                                     "schema": schema}},
                                           temperature=1.0, seed=seed, max_tokens=60)
        if r.choices[0].finish_reason == "stop":
            answer = json.loads(r.choices[0].message.content)
            assert answer["fruit"] in ("apple", "pear") and isinstance(answer["count"], int)
            ended += 1
    assert ended


def test_a_schema_that_does_not_compile_is_a_400(server):
    body = {"messages": ASK, "response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}}}}}
    status, _, raw = server.request("POST", "/v1/chat/completions", json.dumps(body))
    err = json.loads(raw)["error"]
    assert status == 400 and err["param"] == "response_format" and "cannot be compiled" in err["message"]


def test_logprobs_are_the_targets_for_every_token(client):
    r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Name three colours."}],
                                       logprobs=True, top_logprobs=3, temperature=0, max_tokens=24)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens - (r.choices[0].finish_reason == "stop")
    assert r.model_extra["timings"]["draft_n_accepted"] > 0  # some of them were drafted
    for entry in content:
        assert len(entry.top_logprobs) == 3 and entry.logprob <= 0
        assert entry.top_logprobs[0].token == entry.token  # greedy: the chosen one is the most likely
        assert entry.logprob == pytest.approx(entry.top_logprobs[0].logprob)
    assert "".join(e.token for e in content) == r.choices[0].message.content


def test_legacy_completions_echo_and_score(client):
    r = client.completions.create(model="m", prompt="The capital of France is", max_tokens=4, temperature=0,
                                  logprobs=2, echo=True)
    lp = r.choices[0].logprobs
    assert r.choices[0].text.startswith("The capital of France is")
    assert "".join(lp.tokens) == r.choices[0].text and lp.text_offset[0] == 0
    assert lp.token_logprobs[-1] < 0 and len(lp.top_logprobs[-1]) == 2


def test_the_responses_api_answers_whole_and_streamed(client):
    r = client.responses.create(model="m", input="Say hello.", instructions="Be brief.", max_output_tokens=12,
                                temperature=0)
    assert r.object == "response" and r.output_text and r.usage.output_tokens <= 12
    with client.responses.stream(model="m", input=[{"role": "user", "content": [{"type": "input_text",
                                                                                   "text": "Say hello."}]}],
                                 instructions="Be brief.", max_output_tokens=12, temperature=0) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_response()
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "response.output_text.delta" in kinds and final.output_text == r.output_text


def test_discovery_routes(server, client):
    status, _, raw = server.request("GET", "/props")
    props = json.loads(raw)
    assert status == 200 and props["total_slots"] == 2 and props["default_generation_settings"]["n_ctx"] == 1024
    assert "<tool_call>" in props["chat_template"] and props["speculative"]["method"] == "auto"
    meta = client.models.list().data[0].model_extra["meta"]
    assert meta["n_ctx_train"] == 8192 and meta["n_params"] > 100_000_000 and meta["size"] > 0
    status, _, raw = server.request("POST", "/tokenize", json.dumps({"content": "Hello world", "with_pieces": True}))
    pieces = json.loads(raw)["tokens"]
    assert "".join(p["piece"] for p in pieces) == "Hello world"
    status, _, raw = server.request("POST", "/detokenize", json.dumps({"tokens": [p["id"] for p in pieces]}))
    assert json.loads(raw) == {"content": "Hello world"}
    status, _, raw = server.request("POST", "/detokenize", json.dumps({"tokens": [10 ** 9]}))
    assert status == 400 and json.loads(raw)["error"]["param"] == "tokens"
    status, _, raw = server.request("GET", "/slots")
    assert status == 200 and all(not s["is_processing"] for s in json.loads(raw))
