"""GLM-4.5 / 4.6 calls: the name, then each argument as a key and a value,

    <tool_call>get_weather
    <arg_key>city</arg_key>
    <arg_value>Paris</arg_value>
    </tool_call>

A value that reads as JSON (a number, a list, an object) is that value; anything else a string.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from homespec.chatformat.base import Parsed, Term, ToolCall, Writing, held_prefix, lark_string, parameters

OPEN, CLOSE = "<tool_call>", "</tool_call>"
KEY, KEY_END, VALUE, VALUE_END = "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"


class Glm:
    name = "glm"
    needs_special = True  # GLM's tokenizer makes <tool_call> and the arg markers special tokens
    reads_reasoning = False

    def parse(self, text: str, final: bool) -> Parsed:
        content, calls, pos = [], [], 0
        while (start := text.find(OPEN, pos)) >= 0:
            content.append(text[pos:start])
            end = text.find(CLOSE, start)
            if end < 0:
                if final:
                    content.append(text[start:])
                    return Parsed(_tidy(content, calls, final), tuple(calls))
                writing = _writing(text[start + len(OPEN):])
                return Parsed(_tidy(content, calls, final), tuple(calls), writing=writing)
            calls.append(_read(text[start + len(OPEN):end]))
            pos = end + len(CLOSE)
        tail = text[pos:]
        content.append(tail if final else tail[:len(tail) - held_prefix(tail, [OPEN])])
        return Parsed(_tidy(content, calls, final), tuple(calls))

    def call_grammar(self, tools: Sequence[dict[str, Any]], parallel: bool, term: Term) -> str:
        """The names and the keys are the tools'; the values any text without a `<` (not their schema)."""
        rules = []
        for i, tool in enumerate(tools):
            keys = list(parameters(tool).get("properties", {})) or ["value"]
            key = " | ".join(lark_string(k) for k in keys)
            rules.append(f"call{i}: {lark_string(OPEN + tool['function']['name'] + chr(10))} arg{i}* "
                         f"{lark_string(CLOSE)}\narg{i}: {lark_string(KEY)} ({key}) "
                         f"{lark_string(KEY_END + chr(10) + VALUE)} VALUE {lark_string(VALUE_END + chr(10))}")
        calls = 'call ("\\n" call)*' if parallel else "call"
        return (f"start: {calls}\ncall: {' | '.join(f'call{i}' for i in range(len(tools)))}\n"
                + "\n".join(rules) + "\nVALUE: /[^<]*/\n")


def _read(body: str) -> ToolCall:
    name, _, rest = body.partition("\n")
    return ToolCall(name.strip(), _arguments(_pairs(rest, whole=True), closed=True))


def _writing(body: str) -> Writing | None:
    """Once the name's line and the first key are written: `{` and the pairs whose value is closed
    (a value's type is known only then: `12` may yet become `12 apples`)."""
    name, newline, rest = body.partition("\n")
    if not newline or KEY_END not in rest:
        return None
    return Writing(name.strip(), _arguments(_pairs(rest, whole=False), closed=False))


def _pairs(rest: str, whole: bool) -> list[tuple[str, Any]]:
    """The key and value pairs whose value is closed (`whole`, at the call's end: all of them)."""
    pairs = []
    for piece in rest.split(KEY)[1:]:
        key, _, value = piece.partition(KEY_END)
        value, closed, _ = value.split(VALUE, 1)[-1].partition(VALUE_END)
        if not (closed or whole):
            break
        try:
            pairs.append((key.strip(), json.loads(value)))
        except ValueError:
            pairs.append((key.strip(), value))
    return pairs


def _arguments(pairs: list[tuple[str, Any]], closed: bool) -> str:
    """The pairs as a JSON object's text, written as json.dumps writes one; a key written twice
    stays twice (as written), so the text streamed and the text at the end are the same."""
    body = ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {json.dumps(v, ensure_ascii=False)}" for k, v in pairs)
    return "{" + body + ("}" if closed else "")


def _tidy(content: list[str], calls: list[ToolCall], final: bool) -> str:
    text = "".join(content)
    return text.strip() if final and calls else text
