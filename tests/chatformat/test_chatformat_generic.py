"""The generic tool format (homespec/chatformat/generic.py) and answers cut inside a call: pure, no model."""

from __future__ import annotations

import json

import jsonschema
import pytest

from homespec.chatformat.generic import Generic
from homespec.chatformat.hermes import Hermes
from homespec.chatformat.split import Splitter

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}}


@pytest.mark.parametrize("parallel,answers", [(True, True), (False, True), (True, False), (False, False)])
def test_the_schema_takes_what_the_request_allows_and_nothing_else(parallel, answers):
    schema = Generic(parallel, answers).schema([WEATHER, TIME])
    one = {"name": "get_weather", "arguments": {"city": "Paris"}}
    ok = {"tool_calls": [one, {"name": "get_time", "arguments": {"zone": "UTC"}}]} if parallel else {"tool_call": one}
    jsonschema.validate(ok, schema)
    bad = [{"tool_call": {"name": "nope", "arguments": {}}}, {"tool_calls": []},
           {"tool_call": {"name": "get_weather", "arguments": {"town": "x"}}}, {"response": "hi", "extra": 1}]
    if not answers:
        bad.append({"response": "hi"})
    else:
        jsonschema.validate({"response": "hi"}, schema)
    for b in bad:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(b, schema)


def test_the_system_prompt_lists_the_tools_and_the_shapes():
    text = Generic(parallel=False, answers=True).system_prompt([WEATHER])
    listed = json.loads(text.splitlines()[1])
    assert listed == {"name": "get_weather", "description": "The weather in a city",
                      "parameters": WEATHER["function"]["parameters"]}
    assert text.index("{\"response\": \"<your answer>\"}") < text.index("{\"tool_call\": {\"name\"")
    forced = Generic(parallel=True, answers=False).system_prompt([WEATHER])
    assert '{"tool_calls": [' in forced and '"response"' not in forced


def _stream(fmt, text: str, cut: bool = False):
    s = Splitter(fmt, "none")
    pieces = [s.update(text[:i]) for i in range(1, len(text) + 1)]
    pieces.append(s.last(text, whole=not cut))
    return pieces, s.final(text, whole=not cut)


def test_a_streamed_response_joins_to_its_final_reading():
    text = '{"response": "Caf\\u00e9 \\"ol\\u00e9\\" \\ud83d\\ude00 done"}'
    pieces, final = _stream(Generic(), text)
    assert "".join(p.content for p in pieces) == final.content == 'Café "olé" 😀 done'
    assert final.calls == ()


def test_parallel_calls_stream_each_once_complete():
    text = json.dumps({"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}},
                                      {"name": "get_time", "arguments": {"zone": "CET"}}]})
    pieces, final = _stream(Generic(), text)
    calls = [c for p in pieces for c in p.calls]
    joined = ["".join(c.arguments for c in calls if c.index == i) for i in (0, 1)]
    assert [(c.name, json.loads(a)) for c, a in zip(final.calls, joined)] == [("get_weather", {"city": "Paris"}),
                                                                              ("get_time", {"zone": "CET"})]
    assert [c.arguments for c in final.calls] == joined
    assert [c.id for c in final.calls] == [c.id for c in calls if c.opens] and final.content == ""
    assert "".join(p.content for p in pieces) == ""


def test_an_answer_cut_inside_a_call_keeps_the_complete_calls_only():
    """Generic and Hermes alike: the unfinished call is dropped, never returned as text."""
    generic = '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "get_ti'
    pieces, final = _stream(Generic(), generic, cut=True)
    assert [c.name for c in final.calls] == ["get_weather"] and final.content == ""
    hermes = ('Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
              '<tool_call>\n{"name": "get_time", "argum')
    pieces, final = _stream(Hermes(), hermes, cut=True)
    assert [c.name for c in final.calls] == ["get_weather"]
    assert final.content == "Let me check." and "<tool_call>" not in "".join(p.content for p in pieces)
    whole = Splitter(Hermes(), "none").final(hermes)  # read as a whole answer, the open block is text
    assert "<tool_call>" in whole.content


def test_text_that_is_not_the_format_is_the_answer():
    assert Generic().parse("Hello there", True).content == "Hello there"
    assert Generic().parse('{"tool_ca', False).content == ""


def test_the_history_writes_calls_and_answers_as_the_format_does():
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "22 C"}, {"role": "user", "content": "Thanks."}]
    g = Generic(parallel=False)
    out = g.history(messages, [WEATHER])
    assert [m["role"] for m in out] == ["system", "user", "assistant", "user"]
    assert out[0]["content"].startswith("Be brief.\n\n" + g.system_prompt([WEATHER])[:20])
    assert json.loads(out[2]["content"]) == {"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    answer, thanks = out[3]["content"].split("\n")
    assert json.loads(answer) == {"tool_response": {"name": "get_weather", "content": "22 C"}} and thanks == "Thanks."
    bare = g.history(messages[1:], [WEATHER], system_role=False)
    assert bare[0]["role"] == "user" and bare[0]["content"].endswith("Weather in Paris?")
    assert bare[0]["content"].startswith(g.system_prompt([WEATHER]))
