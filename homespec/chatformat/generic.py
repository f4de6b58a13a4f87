"""Tools for a model whose chat template takes none (llama.cpp's "generic" tool format).

The tools are described in the system prompt (`system_prompt`), and the whole answer is held by a
grammar (homespec.grammar, llguidance) to one JSON object (`Generic.schema`):

    {"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}}      one call
    {"tool_calls": [{"name": ..., "arguments": {...}}, ...]}                     one or more (parallel)
    {"response": "It is sunny."}                                                 words (not when a call is forced)

so `auto`, `required` and a named tool work on every model: the grammar gives the model the choice
the request allows and makes whatever it writes a valid call or answer. Earlier turns are written
back in the same shape (`history`): an assistant's calls as the JSON it would have written, the
tools' answers as a user message of `{"tool_response": {"name", "content"}}` lines, so a template
that knows only system, user and assistant renders them, and the answer the model wrote is the
prefix the next request's prompt carries (its KV is reused).
"""

from __future__ import annotations

import json
import re
from typing import Any, Sequence

from homespec.chatformat import partial
from homespec.chatformat.base import Parsed, Term, ToolCall, Writing, call_schema, lark_json

RESPONSE_OPEN = re.compile(r'\s*\{\s*"response"\s*:\s*"')
LEAD = ("You can call tools. Each is given below as JSON: its name, what it does, and the JSON schema of "
        "its arguments.")


class Generic:
    name = "generic"
    needs_special = False
    reads_reasoning = False

    def __init__(self, parallel: bool = True, answers: bool = True) -> None:
        self.parallel = parallel  # several calls in one answer ("tool_calls") or exactly one ("tool_call")
        self.answers = answers  # a {"response": ...} in words is allowed (tool_choice auto)

    def schema(self, tools: Sequence[dict[str, Any]]) -> dict:
        """The JSON schema the whole answer is held to."""
        call = call_schema(tools)
        if self.parallel:
            calls = {"type": "object", "properties": {"tool_calls": {"type": "array", "items": call, "minItems": 1}},
                     "required": ["tool_calls"], "additionalProperties": False}
        else:
            calls = {"type": "object", "properties": {"tool_call": call}, "required": ["tool_call"],
                     "additionalProperties": False}
        if not self.answers:
            return calls
        words = {"type": "object", "properties": {"response": {"type": "string"}}, "required": ["response"],
                 "additionalProperties": False}
        return {"anyOf": [words, calls]}

    def call_grammar(self, tools: Sequence[dict[str, Any]], parallel: bool, term: Term) -> str:
        return "start: " + lark_json(self.schema(tools)) + "\n"

    def system_prompt(self, tools: Sequence[dict[str, Any]]) -> str:
        """What the system prompt says of the tools (appended to the request's own system message)."""
        listed = "\n".join(json.dumps({k: t["function"][k] for k in ("name", "description", "parameters")
                                       if t["function"].get(k) is not None}, ensure_ascii=False) for t in tools)
        if self.parallel:
            call = ('{"tool_calls": [{"name": "<tool name>", "arguments": {<its arguments>}}]} to call tools '
                    "(one or more)")
        else:
            call = '{"tool_call": {"name": "<tool name>", "arguments": {<its arguments>}}} to call a tool'
        if self.answers:  # answering in words first: a small model copies the first shape it is shown
            answer = ('Answer with one JSON object and nothing else: {"response": "<your answer>"} to answer the '
                      f"user directly, or {call}.")
        else:
            answer = f"Answer with one JSON object and nothing else: {call}."
        return f"{LEAD}\n{listed}\n\n{answer}"

    def written(self, calls: Sequence[dict[str, Any]]) -> str:
        """An assistant's earlier calls as this format writes them."""
        objs = [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]} for c in calls]
        if self.parallel or len(objs) > 1:
            return json.dumps({"tool_calls": objs}, ensure_ascii=False)
        return json.dumps({"tool_call": objs[0]}, ensure_ascii=False)

    def parse(self, text: str, final: bool) -> Parsed:
        if not text.lstrip().startswith("{"):
            return Parsed(text)  # not this format at all (no grammar held it): the text is the answer
        found, end = partial.members(text, 0)
        calls, writing = _calls(text, found)
        if end is not None:
            words = next((m.value for m in found if m.key == "response"), "")
            return Parsed(words if isinstance(words, str) else json.dumps(words, ensure_ascii=False), tuple(calls))
        if (m := RESPONSE_OPEN.match(text)) is not None:
            return Parsed(_partial_string(text[m.end():]))
        return Parsed("", tuple(calls), writing=writing)  # calls still being written (or cut)

    def history(self, messages: list[dict[str, Any]], tools: Sequence[dict[str, Any]],
                system_role: bool = True) -> list[dict[str, Any]]:
        """The conversation with the tools in its system message and its calls and tool answers
        written in this format, for a template that knows none of them (`system_role` False: the
        template takes no system message, so the tools go before the first user message). An
        assistant's text beside its calls is not kept: the format has no place for both."""
        out: list[dict[str, Any]] = []
        names: dict[str, str] = {}
        for m in messages:
            if m["role"] == "assistant" and m.get("tool_calls"):
                names.update({c.get("id", ""): c["function"]["name"] for c in m["tool_calls"]})
                out.append({"role": "assistant", "content": self.written(m["tool_calls"])})
            elif m["role"] == "tool":
                name = m.get("name") or names.get(m.get("tool_call_id") or "", "")
                answer = {"tool_response": {"name": name, "content": m.get("content", "")} if name
                          else {"content": m.get("content", "")}}
                _add_user(out, json.dumps(answer, ensure_ascii=False))
            elif m["role"] == "user":
                _add_user(out, m.get("content", ""))
            else:
                out.append({k: v for k, v in m.items() if k not in ("tool_calls", "reasoning_content")})
        prompt = self.system_prompt(tools)
        if out and out[0]["role"] == "system":
            out[0] = {**out[0], "content": f"{out[0]['content']}\n\n{prompt}" if out[0]["content"] else prompt}
        else:
            out.insert(0, {"role": "system", "content": prompt})
        if not system_role:
            system = out.pop(0)["content"]
            first = next((i for i, m in enumerate(out) if m["role"] == "user"), None)
            if first is None:
                out.insert(0, {"role": "user", "content": system})
            else:
                out[first] = {**out[first], "content": f"{system}\n\n{out[first]['content']}"}
        return out


def _add_user(out: list[dict[str, Any]], text: str) -> None:
    """A user turn, joined to the one before it if that is a user turn too (templates that want
    turns to alternate would refuse two in a row)."""
    if out and out[-1]["role"] == "user":
        out[-1] = {**out[-1], "content": f"{out[-1]['content']}\n{text}"}
    else:
        out.append({"role": "user", "content": text})


def _calls(text: str, found: list[partial.Member]) -> tuple[list[ToolCall], Writing | None]:
    """The complete calls of a `tool_call` / `tool_calls` member, and the one being written."""
    calls: list[ToolCall] = []
    for m in found:
        if m.key == "tool_call":
            reading = partial.read_call(text, m.start)
            if reading.call is not None and m.end is not None:
                return [reading.call], None
            return [], reading.writing
        if m.key == "tool_calls":
            items, _ = partial.elements(text, m.start)
            for start, end in items:
                reading = partial.read_call(text, start)
                if end is None:
                    return calls, reading.writing
                if reading.call is not None:  # an item that is no call is passed over
                    calls.append(reading.call)
            return calls, None
    return calls, None


def _partial_string(body: str) -> str:
    """The text of a JSON string still being written (`body`: what follows its opening quote), up
    to its closing quote or to the last character whose escape is complete (a surrogate pair's
    first half waits for its second)."""
    i = 0
    while i < len(body) and body[i] != '"':
        if body[i] != "\\":
            i += 1
        elif body[i + 1:i + 2] != "u":
            if i + 2 > len(body):
                break
            i += 2
        else:
            if i + 6 > len(body):
                break
            high = body[i + 2:i + 4].lower() in ("d8", "d9", "da", "db")
            if high and i + 12 > len(body):
                break
            i += 12 if high else 6
    try:
        return json.loads(f'"{body[:i]}"')
    except ValueError:
        return ""
