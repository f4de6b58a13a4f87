"""The Responses API's stream of a call written out as it is written (homespec/server/responses_out.py),
with a character tokenizer: pure, no model. The real SDK against a real server:
tests/server/test_server_tool_stream.py."""

from __future__ import annotations

import json
from types import SimpleNamespace

from char_tokenizer import CharTokenizer
from homespec.chatformat.hermes import Hermes
from homespec.chatformat.split import CallPiece, Delta
from homespec.engine.responses import Finish, TextDelta
from homespec.server.chat import Turn
from homespec.server.responses_in import answered
from homespec.server.responses_out import ResponsesOutput
from homespec.server.shapes import Answer

CALL = '<tool_call>\n{"name": "get_time", "arguments": {"zone": "Europe/Paris", "format": "24h"}}\n</tool_call>'


def _events(text: str, finish: str, steps: list[int]) -> list[dict]:
    out = ResponsesOutput(Answer("chat", "m"), CharTokenizer(), Turn("", [1], None, Hermes(), "none", False), {})
    raw, at = [], 0
    for n in steps:
        out.take(TextDelta(text[at:n], tuple(ord(c) for c in text[at:n])))
        raw.extend(out._pieces(out.splitter.update(out._source())))
        at = n
    fin = Finish(finish, text, tuple(ord(c) for c in text), (1,), (), 0.1, 0.2)
    raw.extend(out._end(SimpleNamespace(error=None), SimpleNamespace(method="POST", url=SimpleNamespace(path="/")), fin))
    return [json.loads(e.strip().split("\n")[1].removeprefix("data: ")) for e in raw]


def test_a_call_then_text_in_one_step_keeps_the_items_in_order():
    """The call's last piece and the text after it arrive in one step: the call's item is done
    before the message's opens."""
    text = CALL + "\nDone."
    events = _events(text, "eos", [text.index('"Europe') + 3, len(text)])
    kinds = [e["type"] for e in events]
    assert kinds[:4] == ["response.output_item.added", "response.function_call_arguments.delta",
                         "response.function_call_arguments.delta", "response.function_call_arguments.done"]
    assert kinds[4] == "response.output_item.done" and events[4]["item"]["status"] == "completed"
    assert events[5]["type"] == "response.output_item.added" and events[5]["item"]["type"] == "message"
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta")
    assert deltas == events[3]["arguments"] == '{"zone": "Europe/Paris", "format": "24h"}'
    final = events[-1]["response"]
    assert [i["type"] for i in final["output"]] == ["function_call", "message"]


def test_a_cut_call_ends_incomplete_without_its_arguments_done():
    text = CALL[:CALL.index("24h")]
    events = _events(text, "length", list(range(1, len(text) + 1)))
    kinds = [e["type"] for e in events]
    assert "response.function_call_arguments.done" not in kinds and "response.output_text.delta" not in kinds
    done = next(e for e in events if e["type"] == "response.output_item.done")
    sent = "".join(e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta")
    assert done["item"]["status"] == "incomplete" and done["item"]["arguments"] == sent
    assert sent == '{"zone": "Europe/Paris", "format": "'
    final = events[-1]["response"]
    assert final["status"] == "incomplete" and [i["status"] for i in final["output"]] == ["incomplete"]


def test_a_cut_call_is_not_carried_on_by_a_chained_request():
    output = [{"type": "function_call", "call_id": "call_1", "name": "get_time", "arguments": '{"zone": "Eu',
               "status": "incomplete"}]
    assert answered(output) == [{"role": "assistant", "content": None}]


def test_a_call_that_fails_to_close_ends_incomplete_and_the_next_call_is_its_own():
    """A call opened while written whose block then does not read as a call: its item is done
    `incomplete` (no arguments .done), its block goes out as a message, and the next call is a new
    item with its own call_id, name and arguments, completed."""
    broken = '<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}{"x": 1}\n</tool_call>'
    text = broken + "\n" + CALL
    events = _events(text, "eos", list(range(1, len(text) + 1)))
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert [(i["type"], i["status"]) for i in done] == [("function_call", "incomplete"), ("message", "completed"),
                                                       ("function_call", "completed")]
    assert done[0]["arguments"] == '{"zone": "UTC"}' and done[1]["content"][0]["text"] == broken
    assert done[2]["call_id"] != done[0]["call_id"] and done[2]["name"] == "get_time"
    assert done[2]["arguments"] == '{"zone": "Europe/Paris", "format": "24h"}'
    args_done = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert [e["item_id"] for e in args_done] == [done[2]["id"]]
    assert events[-1]["response"]["output"] == done


def test_text_after_an_open_call_closes_its_item_incomplete():
    """Whatever closes a function_call item other than its own end leaves it `incomplete`."""
    out = ResponsesOutput(Answer("chat", "m"), CharTokenizer(), Turn("", [1], None, Hermes(), "none", False), {})
    out._pieces(Delta(calls=(CallPiece(0, "call_1", "get_time", '{"zone": "U', opens=True),)))
    raw = out._pieces(Delta("Sorry."))
    events = [json.loads(e.strip().split("\n")[1].removeprefix("data: ")) for e in raw]
    assert events[0]["type"] == "response.output_item.done" and events[0]["item"]["status"] == "incomplete"
    assert "response.function_call_arguments.done" not in [e["type"] for e in events]
