"""The Responses API's request reading (namespace tools, hosted tools, tool outputs as parts, chained
conversations) and the bounded response store: pure, no model."""

from __future__ import annotations

import logging

import pytest

from homespec.server.errors import ApiError
from homespec.server.responses_in import ResponsesRequest, answered, chat_request, flat_name
from homespec.server.store import ResponseStore

SHELL = {"type": "function", "name": "exec_command", "description": "Run a command", "strict": False,
         "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}
# Codex CLI 0.171's shapes: a namespace with nested functions, and a hosted web search
AGENTS = {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents",
          "tools": [{"type": "function", "name": "spawn_agent", "parameters": {"type": "object", "properties": {}}},
                    {"type": "function", "name": "close_agent", "parameters": {"type": "object", "properties": {}}}]}
SEARCH = {"type": "web_search", "external_web_access": False}


def test_namespace_tools_are_flattened_and_hosted_ones_left_out_with_a_warning(caplog):
    body = ResponsesRequest.model_validate({"input": "hi", "tools": [SHELL, AGENTS, SEARCH]})
    with caplog.at_level(logging.WARNING, logger="homespec.server"):
        reading = chat_request(body)
    names = [t.function.name for t in reading.chat.tools]
    assert names == ["exec_command", "multi_agent_v1__spawn_agent", "multi_agent_v1__close_agent"]
    assert reading.names["multi_agent_v1__close_agent"] == ("multi_agent_v1", "close_agent")
    assert any("web_search" in r.message for r in caplog.records)
    assert flat_name("mcp__fs__", "__read") == "mcp__fs__read"  # Codex's own joining


def test_a_call_of_a_namespace_tool_and_its_output_parts_are_read_back():
    body = ResponsesRequest.model_validate({"input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "spawn"}]},
        {"type": "function_call", "call_id": "c1", "namespace": "multi_agent_v1", "name": "spawn_agent",
         "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "agent 7"}]}],
        "tools": [AGENTS], "tool_choice": {"type": "function", "namespace": "multi_agent_v1", "name": "close_agent"}})
    chat = chat_request(body).chat
    assert chat.messages[1].tool_calls[0].function.name == "multi_agent_v1__spawn_agent"
    assert chat.messages[1].content is None and chat.messages[2].text() == "agent 7"
    assert chat.tool_choice.function.name == "multi_agent_v1__close_agent"
    with pytest.raises(ApiError, match="web_search"):
        chat_request(ResponsesRequest.model_validate({"input": "x", "tool_choice": {"type": "web_search"}}))


def test_a_chained_request_carries_the_stored_conversation_after_its_own_instructions():
    first = ResponsesRequest.model_validate({"input": "Name a colour.", "instructions": "Be brief."})
    reading = chat_request(first)
    output = [{"type": "message", "content": [{"type": "output_text", "text": "Blue."}]},
              {"type": "function_call", "call_id": "c2", "namespace": "multi_agent_v1", "name": "close_agent",
               "arguments": "{}"}]
    stored = [*reading.new, *answered(output)]
    assert stored[-1] == {"role": "assistant", "content": "Blue.", "tool_calls": [
        {"id": "c2", "type": "function", "function": {"name": "multi_agent_v1__close_agent", "arguments": "{}"}}]}
    second = chat_request(ResponsesRequest.model_validate({"input": "Another?", "instructions": "Be brief.",
                                                           "previous_response_id": "resp_1"}), tuple(stored))
    assert [m.role for m in second.chat.messages] == ["system", "user", "assistant", "user"]
    assert second.new == [{"role": "user", "content": "Another?"}]


def _response(rid: str, pad: int = 0) -> dict:
    return {"id": rid, "object": "response", "output": [], "pad": "x" * pad}


def test_the_store_drops_the_least_recently_used_past_its_count():
    store = ResponseStore(max_count=2, max_bytes=1 << 20)
    for rid in ("a", "b"):
        assert store.put("", _response(rid), [])
    assert store.get("", "a") is not None  # a is now the most recent
    store.put("", _response("c"), [])
    assert store.get("", "b") is None and store.get("", "a") and store.get("", "c") and len(store) == 2


def test_the_store_keeps_its_bytes_bounded_and_refuses_one_too_big():
    store = ResponseStore(max_count=100, max_bytes=3000)
    for i in range(10):
        store.put("", _response(str(i), 900), [{"role": "user", "content": "hi"}])
        assert store.bytes <= 3000
    assert len(store) == 3 and store.get("", "9") is not None
    assert not store.put("", _response("big", 5000), [])
    assert store.delete("", "9") and not store.delete("", "9") and len(store) == 2
    assert not ResponseStore(max_count=0).put("", _response("x"), [])  # --store-responses 0: off


def test_each_key_sees_only_its_own_responses():
    keyed = ResponseStore(keyed=True)
    alice, bob = keyed.owner({"authorization": "Bearer alice"}), keyed.owner({"x-api-key": "bob"})
    assert alice != bob and "alice" not in alice and len(alice) == 32
    keyed.put(alice, _response("r1"), [])
    assert keyed.get(bob, "r1") is None and not keyed.delete(bob, "r1") and keyed.get(alice, "r1") is not None
    assert ResponseStore().owner({"authorization": "Bearer anything"}) == ""  # no --api-key: one store
