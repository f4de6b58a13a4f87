"""The APIs coding agents speak, through their own client libraries, against one real `homespec serve`
(the embedded SmolLM2, whose template takes no tools: every tool call here goes through the generic
format; `--max-tokens 48`; an API key): the Anthropic SDK (messages, stream, a tool round trip,
count_tokens, errors), the stored Responses API (previous_response_id, GET, DELETE), litellm's tool
round trip, and the openai-agents SDK's tool loop over its Responses and Chat Completions models."""

from __future__ import annotations

import json
import os

import pytest

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")
from test_server import Server  # noqa: E402 - the subprocess server of tests/server/test_server.py

pytestmark = pytest.mark.slow
KEY = "agents-key-5678"
DEFAULT_MAX = 48
WEATHER = {"name": "get_weather", "description": "The current weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
OPENAI_WEATHER = {"type": "function", "function": {"name": "get_weather", "description": WEATHER["description"],
                                                   "parameters": WEATHER["input_schema"]}}
GREEDY = {"temperature": 0}


@pytest.fixture(scope="module")
def server():
    s = Server("--ctx", "2048", "--threads", "2", "--parallel", "2", "--max-tokens", str(DEFAULT_MAX),
               "--api-key", KEY).wait_ready()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def claude(server):
    return anthropic.Anthropic(base_url=server.base, api_key=KEY, max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key=KEY, max_retries=0, timeout=300)


def test_the_start_line_shows_the_default_limit(server):
    assert f"answers up to {DEFAULT_MAX} tokens" in server.line


def test_anthropic_messages_whole_and_streamed_are_the_same_answer(claude):
    ask = [{"role": "user", "content": "What is the capital of France?"}]
    whole = claude.messages.create(model="smol", max_tokens=24, messages=ask, system="Answer briefly.",
                                   stop_sequences=["\n\n\n"], extra_body=GREEDY)
    assert whole.type == "message" and whole.role == "assistant" and whole.id.startswith("msg_")
    assert whole.stop_reason in ("end_turn", "max_tokens") and whole.content[0].type == "text"
    assert whole.usage.output_tokens <= 24 and whole.usage.input_tokens > 0
    with claude.messages.stream(model="smol", max_tokens=24, messages=ask, system="Answer briefly.",
                                stop_sequences=["\n\n\n"], extra_body=GREEDY) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and "content_block_delta" in kinds
    assert final.content[0].text == whole.content[0].text and final.stop_reason == whole.stop_reason
    assert final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0) == \
        whole.usage.input_tokens + (whole.usage.cache_read_input_tokens or 0)
    counted = claude.messages.count_tokens(model="smol", messages=ask, system="Answer briefly.")
    assert counted.input_tokens == whole.usage.input_tokens + (whole.usage.cache_read_input_tokens or 0)


def test_anthropic_tool_round_trip(claude):
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = claude.messages.create(model="smol", max_tokens=60, messages=ask, tools=[WEATHER],
                                   tool_choice={"type": "any", "disable_parallel_tool_use": True}, extra_body=GREEDY)
    (use,) = [b for b in first.content if b.type == "tool_use"]
    assert first.stop_reason == "tool_use" and use.name == "get_weather" and isinstance(use.input["city"], str)
    assert use.id.startswith("toolu_")
    again = ask + [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
                   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "22 C, sunny"}]}]
    second = claude.messages.create(model="smol", max_tokens=40, messages=again, tools=[WEATHER], extra_body=GREEDY)
    assert second.stop_reason in ("end_turn", "tool_use", "max_tokens") and second.content
    assert second.usage.cache_read_input_tokens > 0  # the first turn's prompt came from a slot's cache
    with claude.messages.stream(model="smol", max_tokens=60, messages=ask, tools=[WEATHER],
                                tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
                                extra_body=GREEDY) as stream:
        final = stream.get_final_message()
    assert final.content[0].type == "tool_use" and "city" in final.content[0].input


def test_anthropic_errors_are_anthropics(server, claude):
    with pytest.raises(anthropic.AuthenticationError) as e:
        anthropic.Anthropic(base_url=server.base, api_key="wrong", max_retries=0).messages.create(
            model="smol", max_tokens=4, messages=[{"role": "user", "content": "hi"}])
    assert e.value.body == {"type": "error", "error": {"type": "authentication_error", "message": e.value.body[
        "error"]["message"]}}
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model="smol", max_tokens=4, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}]}])
    assert e.value.body["error"]["type"] == "invalid_request_error" and "image" in e.value.body["error"]["message"]
    status, _, raw = server.request("POST", "/v1/messages", json.dumps({"messages": [{"role": "user", "content": "x"}]}),
                                    headers={"x-api-key": KEY})
    assert status == 400 and json.loads(raw)["error"]["type"] == "invalid_request_error"


def test_a_stored_response_chains_reuses_its_cache_and_is_deleted(client):
    first = client.responses.create(model="smol", input="Name a colour.", instructions="Answer in one word.",
                                    max_output_tokens=8, temperature=0)
    assert first.store is True and client.responses.retrieve(first.id).output_text == first.output_text
    second = client.responses.create(model="smol", input="And another one?", instructions="Answer in one word.",
                                     previous_response_id=first.id, max_output_tokens=8, temperature=0)
    assert second.previous_response_id == first.id
    assert second.usage.input_tokens > first.usage.input_tokens
    assert second.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens  # the chain's KV reused
    client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)
    with pytest.raises(openai.BadRequestError, match="previous_response_id"):
        client.responses.create(model="smol", input="x", previous_response_id=first.id, max_output_tokens=4)
    unstored = client.responses.create(model="smol", input="Hi", store=False, max_output_tokens=4)
    assert unstored.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)


def test_the_server_limit_holds_where_a_request_sets_none(client):
    r = client.chat.completions.create(model="smol", messages=[{"role": "user", "content": "Tell a long story."}],
                                       temperature=0)
    assert r.usage.completion_tokens <= DEFAULT_MAX
    text = client.completions.create(model="smol", prompt="Once upon a time", temperature=0)
    assert r.choices[0].finish_reason == "length" and text.usage.completion_tokens == DEFAULT_MAX  # not 16


def test_tools_work_on_a_template_without_tools_and_a_cut_call_leaks_nothing(client):
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = client.chat.completions.create(model="smol", messages=ask, tools=[OPENAI_WEATHER], tool_choice="required",
                                       parallel_tool_calls=False, max_tokens=60, temperature=0)
    (call,) = r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason == "tool_calls" and call.function.name == "get_weather"
    assert "city" in json.loads(call.function.arguments)
    cut = client.chat.completions.create(model="smol", messages=ask, tools=[OPENAI_WEATHER], tool_choice="required",
                                         max_tokens=6, temperature=0)
    assert cut.choices[0].finish_reason == "length" and not cut.choices[0].message.content  # no markup
    assert not cut.choices[0].message.tool_calls
    streamed = list(client.chat.completions.create(model="smol", messages=ask, tools=[OPENAI_WEATHER],
                                                   tool_choice="required", max_tokens=6, temperature=0, stream=True))
    assert not any(c.choices and (c.choices[0].delta.content or c.choices[0].delta.tool_calls) for c in streamed)


def test_an_assistant_turn_without_content_is_read(server):
    calls = [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]
    for turn in ({"role": "assistant", "tool_calls": calls},
                 {"role": "assistant", "function_call": calls[0]["function"]}):
        body = {"messages": [{"role": "user", "content": "Weather in Paris?"}, turn,
                             {"role": "tool" if "tool_calls" in turn else "function", "tool_call_id": "call_1",
                              "name": "get_weather", "content": "22 C"}],
                "tools": [OPENAI_WEATHER], "max_tokens": 8}
        status, _, raw = server.request("POST", "/v1/chat/completions", json.dumps(body), key=KEY)
        assert status == 200, raw
    status, _, raw = server.request("POST", "/v1/chat/completions", json.dumps(
        {"messages": [{"role": "user"}], "max_tokens": 4}), key=KEY)
    assert status == 400 and json.loads(raw)["error"]["param"] == "messages.0.content"


def test_litellm_tool_round_trip(server):
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch of its price list
    litellm = pytest.importorskip("litellm")
    kw = {"model": "openai/smol", "api_base": server.base + "/v1", "api_key": KEY, "tools": [OPENAI_WEATHER],
          "temperature": 0, "max_tokens": 60}
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = litellm.completion(messages=messages, tool_choice="required", parallel_tool_calls=False, **kw)
    message = first.choices[0].message
    assert message.tool_calls and message.tool_calls[0].function.name == "get_weather"
    messages.append(message.model_dump(exclude_none=True))  # litellm's own loop: no content key
    assert "content" not in messages[-1]
    messages.append({"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": "22 C, sunny"})
    second = litellm.completion(messages=messages, **kw)
    assert second.choices[0].finish_reason in ("stop", "tool_calls", "length")


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_the_agents_sdk_runs_its_tool_loop(server, api):
    agents = pytest.importorskip("agents")
    agents.set_tracing_disabled(True)
    asked: list[str] = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        asked.append(city)
        return f"22 C and sunny in {city}"

    client = openai.AsyncOpenAI(base_url=server.base + "/v1", api_key=KEY, max_retries=0, timeout=300)
    model = agents.OpenAIResponsesModel("smol", client) if api == "responses" else \
        agents.OpenAIChatCompletionsModel("smol", client)
    agent = agents.Agent(name="weather", instructions="Use the tool to answer.", tools=[get_weather], model=model,
                         model_settings=agents.ModelSettings(tool_choice="required", temperature=0, max_tokens=60))
    try:
        result = agents.Runner.run_sync(agent, "What is the weather in Paris?", max_turns=3)
        items, responses = result.new_items, result.raw_responses
    except agents.MaxTurnsExceeded as e:
        # a 135M model may call the tool again and again: the loop still went round, each turn
        # answered on the wire with the tool's output carried back; the model's choice is its own
        items, responses = e.run_data.new_items, e.run_data.raw_responses
    kinds = [type(i).__name__ for i in items]
    assert asked and "ToolCallItem" in kinds and "ToolCallOutputItem" in kinds
    assert len(responses) >= 2  # a second turn read the tool's output
