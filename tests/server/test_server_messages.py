"""Anthropic's Messages API read as chat (homespec/server/messages_in.py) and its answer's shapes
(homespec/server/messages_out.py), with a character tokenizer: pure, no model. The real SDK
against a real server: tests/server/test_server_agents.py."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from char_tokenizer import CharTokenizer
from homespec.chatformat.generic import Generic
from homespec.engine.responses import Finish, TextDelta
from homespec.server.chat import Turn
from homespec.server.errors import ApiError, anthropic_error
from homespec.server.messages_in import MessagesRequest, chat_request
from homespec.server.messages_out import MessagesOutput
from homespec.server.shapes import Answer

WEATHER = {"name": "get_weather", "description": "weather", "input_schema": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def _read(**body):
    return chat_request(MessagesRequest.model_validate({"max_tokens": 32, **body}))


def test_blocks_become_chat_messages_in_anthropics_order():
    chat = _read(system=[{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Be kind."}], messages=[
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm", "signature": ""},
                                          {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                           "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                      "content": [{"type": "text", "text": "22 C"}]},
                                     {"type": "tool_result", "tool_use_id": "toolu_2", "content": "no", "is_error": True},
                                     {"type": "text", "text": "And tomorrow?"}]}])
    assert [m.role for m in chat.messages] == ["system", "user", "assistant", "tool", "tool", "user"]
    assert chat.messages[0].text() == "Be brief.\nBe kind."
    assistant = chat.messages[2]
    assert assistant.content is None and assistant.reasoning_content == "hmm"
    assert json.loads(assistant.tool_calls[0].function.arguments) == {"city": "Paris"}
    assert (chat.messages[3].tool_call_id, chat.messages[3].text()) == ("toolu_1", "22 C")
    assert chat.messages[4].text() == "Error: no" and chat.messages[5].text() == "And tomorrow?"
    assert chat.chat_template_kwargs == {"enable_thinking": False}  # thinking not enabled


@pytest.mark.parametrize("choice,want", [({"type": "auto"}, "auto"), ({"type": "any"}, "required"),
                                         ({"type": "none"}, "none")])
def test_tool_choice_is_chats(choice, want):
    chat = _read(messages=[{"role": "user", "content": "x"}], tools=[WEATHER], tool_choice=choice)
    assert chat.tool_choice == want and chat.tools[0].function.parameters == WEATHER["input_schema"]
    named = _read(messages=[{"role": "user", "content": "x"}], tools=[WEATHER],
                  tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True})
    assert named.tool_choice.function.name == "get_weather" and named.parallel_tool_calls is False


def test_server_tools_are_left_out_and_what_cannot_be_read_is_a_400():
    chat = _read(messages=[{"role": "user", "content": "x"}],
                 tools=[WEATHER, {"type": "web_search_20250305", "name": "web_search"}])
    assert [t.function.name for t in chat.tools] == ["get_weather"]
    with pytest.raises(ApiError, match="max_tokens"):
        chat_request(MessagesRequest.model_validate({"messages": [{"role": "user", "content": "x"}]}))
    assert chat_request(MessagesRequest.model_validate({"messages": [{"role": "user", "content": "x"}]}),
                        counting=True).max_tokens is None
    with pytest.raises(ApiError, match="'image' blocks") as e:
        _read(messages=[{"role": "user", "content": [{"type": "image", "source": {}}]}])
    assert anthropic_error(e.value) == {"type": "error", "error": {"type": "invalid_request_error",
                                                                   "message": e.value.message}}
    assert anthropic_error(ApiError(503, "busy"))["error"]["type"] == "overloaded_error"


def _events(out: MessagesOutput, text: str, fin: Finish) -> list[dict]:
    raw: list[str] = []
    for c in text:
        out.take(TextDelta(c, (ord(c),)))
        raw.extend(out._pieces(out.splitter.update(out._source(), False)))
    raw.extend(out._end(SimpleNamespace(error=None), SimpleNamespace(method="POST", url=SimpleNamespace(path="/")), fin))
    events = []
    for e in raw:
        kind, data = e.strip().split("\n")
        body = json.loads(data.removeprefix("data: "))
        assert kind == f"event: {body['type']}"
        events.append(body)
    return events


def test_a_streamed_call_is_a_tool_use_block_with_its_input_json():
    text = json.dumps({"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]})
    fin = Finish("eos", text, tuple(ord(c) for c in text), (1, 2, 3), (), 0.1, 0.2, cached_tokens=2)
    out = MessagesOutput(Answer("chat", "m"), CharTokenizer(), Turn("", [1, 2, 3], None, Generic(), "none", False), False, ())
    events = _events(out, text, fin)
    kinds = [e["type"] for e in events]
    assert kinds[0] == "content_block_start" and kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(kinds[1:-3]) == {"content_block_delta"} and len(kinds[1:-3]) > 3  # the input as it is written
    start, deltas = events[0], events[1:-3]
    assert start["content_block"]["type"] == "tool_use" and start["content_block"]["id"].startswith("toolu_")
    assert start["content_block"]["input"] == {} and start["index"] == 0
    assert {d["delta"]["type"] for d in deltas} == {"input_json_delta"} and {d["index"] for d in deltas} == {0}
    assert "".join(d["delta"]["partial_json"] for d in deltas) == '{"city": "Paris"}'
    assert events[-2]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert events[-2]["usage"] == {"input_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 2,
                                  "output_tokens": len(text)}


def test_thinking_streams_as_its_own_block_when_enabled_and_not_otherwise():
    text = "Let me think.</think>\nHello!"
    fin = Finish("length", text, tuple(ord(c) for c in text), (1,), (), 0.1, 0.2)
    turn = Turn("", [1], None, None, "deepseek", starts_open=True)
    events = _events(MessagesOutput(Answer("chat", "m"), CharTokenizer(), turn, True, ()), text, fin)
    starts = [e["content_block"]["type"] for e in events if e["type"] == "content_block_start"]
    assert starts == ["thinking", "text"] and [e["index"] for e in events if e["type"] == "content_block_stop"] == [0, 1]
    thought = "".join(e["delta"].get("thinking", "") for e in events if e["type"] == "content_block_delta")
    said = "".join(e["delta"].get("text", "") for e in events if e["type"] == "content_block_delta")
    assert (thought, said) == ("Let me think.", "Hello!") and events[-2]["delta"]["stop_reason"] == "max_tokens"
    hidden = _events(MessagesOutput(Answer("chat", "m"), CharTokenizer(), turn, False, ()), text, fin)
    assert [e["content_block"]["type"] for e in hidden if e["type"] == "content_block_start"] == ["text"]


def test_a_stop_sequence_is_named():
    out = MessagesOutput(Answer("chat", "m"), CharTokenizer(), Turn("", [1], None, None, "none", False), False, ("END", "##"))
    fin = Finish("stop", "one two ", tuple(ord(c) for c in "one two ##"), (1,), (), 0.1, 0.2)
    assert out.ending(fin, False) == {"stop_reason": "stop_sequence", "stop_sequence": "##"}
