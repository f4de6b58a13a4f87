"""Tool-call arguments streamed as they are written, through the real clients against one real
`homespec serve` (the embedded SmolLM2, its template takes no tools: the calls go through the generic
format under a grammar): the openai SDK's chat stream and Responses stream and the anthropic SDK's
messages.stream each receive a call's arguments in several pieces that join to the arguments the
same request answers whole; a call cut by the output limit ends without leaking anything."""

from __future__ import annotations

import json

import pytest

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")
from test_server import Server  # noqa: E402 - the subprocess server of tests/server/test_server.py

pytestmark = pytest.mark.slow
SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}, "title": {"type": "string"},
                                           "body": {"type": "string"}}, "required": ["path", "title", "body"]}
NOTE = {"type": "function", "function": {"name": "save_note", "description": "Save a note to a file",
                                         "parameters": SCHEMA}}
ASK = "Save a note called 'Shopping' in notes/shopping.md listing eggs, milk, bread, apples and coffee."
CHAT = {"model": "smol", "messages": [{"role": "user", "content": ASK}], "tools": [NOTE], "tool_choice": "required",
        "parallel_tool_calls": False, "temperature": 0, "max_tokens": 160}


@pytest.fixture(scope="module")
def server():
    s = Server("--ctx", "2048", "--threads", "2", "--parallel", "1").wait_ready()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key="any", max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def whole(client):
    """The call answered whole: what every stream must join to."""
    r = client.chat.completions.create(**CHAT)
    (call,) = r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason == "tool_calls" and call.function.name == "save_note"
    assert set(json.loads(call.function.arguments)) == {"path", "title", "body"}
    return call.function.arguments


def test_chat_streams_the_arguments_in_pieces(client, whole):
    chunks = list(client.chat.completions.create(**CHAT, stream=True))
    deltas = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    first, pieces = deltas[0], deltas[1:]
    assert first.index == 0 and first.id.startswith("call_") and first.type == "function"
    assert first.function.name == "save_note" and first.function.arguments == ""
    assert len(pieces) > 1 and all(p.index == 0 and p.id is None and p.function.name is None for p in pieces)
    assert "".join(p.function.arguments for p in pieces) == whole
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]
    assert not any(c.choices and c.choices[0].delta.content for c in chunks)


def test_responses_stream_the_arguments_in_pieces(client, whole):
    asked = {"model": "smol", "input": ASK, "tools": [{"type": "function", "name": "save_note",
                                                       "description": "Save a note to a file", "parameters": SCHEMA}],
             "tool_choice": "required", "parallel_tool_calls": False, "temperature": 0, "max_output_tokens": 160}
    events = list(client.responses.create(**asked, stream=True))
    kinds = [e.type for e in events]
    added = next(e for e in events if e.type == "response.output_item.added")
    assert added.item.type == "function_call" and added.item.arguments == "" and added.item.name == "save_note"
    pieces = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert len(pieces) > 1 and "".join(pieces) == done.arguments == whole
    assert kinds.index("response.output_item.added") < kinds.index("response.function_call_arguments.delta") \
        < kinds.index("response.function_call_arguments.done") < kinds.index("response.output_item.done")
    final = events[-1].response
    assert events[-1].type == "response.completed" and final.output[0].arguments == whole
    assert final.output[0].call_id == added.item.call_id and final.output[0].status == "completed"
    with client.responses.stream(**asked) as stream:  # the SDK's own helper accumulates the same arguments
        assert stream.get_final_response().output[0].arguments == whole


def test_anthropic_streams_the_input_in_pieces(server, whole):
    claude = anthropic.Anthropic(base_url=server.base, api_key="any", max_retries=0, timeout=300)
    tool = {"name": "save_note", "description": "Save a note to a file", "input_schema": SCHEMA}
    with claude.messages.stream(model="smol", max_tokens=160, messages=[{"role": "user", "content": ASK}],
                                tools=[tool], tool_choice={"type": "any", "disable_parallel_tool_use": True},
                                extra_body={"temperature": 0}) as stream:
        events = list(stream)
        final = stream.get_final_message()
    pieces = [e.delta.partial_json for e in events if e.type == "content_block_delta"
              and e.delta.type == "input_json_delta"]
    assert len(pieces) > 1 and "".join(pieces) == whole
    (use,) = final.content
    assert use.type == "tool_use" and use.name == "save_note" and use.input == json.loads(whole)
    assert final.stop_reason == "tool_use"


def test_a_call_cut_by_the_limit_ends_without_leaking(client, server, whole):
    """max_tokens inside the arguments: the chat stream stops sending pieces (finish_reason
    `length`), the Responses item ends `incomplete`, the anthropic block stops (`max_tokens`); none
    sends the call's markup as text, and the answers read whole drop the cut call."""
    cut = {**CHAT, "max_tokens": 36}
    chunks = list(client.chat.completions.create(**cut, stream=True))
    deltas = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    sent = "".join(d.function.arguments or "" for d in deltas)
    assert deltas and whole.startswith(sent) and sent != whole  # a prefix of the call, and no more
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]
    assert not any(c.choices and c.choices[0].delta.content for c in chunks)
    plain = client.chat.completions.create(**cut)
    assert plain.choices[0].finish_reason == "length" and not plain.choices[0].message.tool_calls
    assert not plain.choices[0].message.content
    events = list(client.responses.create(model="smol", input=ASK, tools=[{"type": "function", "name": "save_note",
                                                                          "parameters": SCHEMA}],
                                          tool_choice="required", parallel_tool_calls=False, temperature=0,
                                          max_output_tokens=36, stream=True))
    final = events[-1].response
    assert final.status == "incomplete" and [i.status for i in final.output] == ["incomplete"]
    assert not any(e.type == "response.function_call_arguments.done" or e.type.startswith("response.output_text")
                   for e in events)
    claude = anthropic.Anthropic(base_url=server.base, api_key="any", max_retries=0, timeout=300)
    with claude.messages.stream(model="smol", max_tokens=36, messages=[{"role": "user", "content": ASK}],
                                tools=[{"name": "save_note", "input_schema": SCHEMA}], tool_choice={"type": "any"},
                                extra_body={"temperature": 0}) as stream:
        message = stream.get_final_message()
    assert message.stop_reason == "max_tokens" and [b.type for b in message.content] == ["tool_use"]
