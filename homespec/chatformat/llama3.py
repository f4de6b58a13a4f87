"""Llama 3.1 / 3.2 / 3.3 JSON calls: the whole answer is the call (after `<|python_tag|>` when the
model uses it), several separated by `;`:

    {"name": "get_weather", "parameters": {"city": "Paris"}}

An answer that does not read as calls from its start to its end is content.
"""

from __future__ import annotations

from typing import Any, Sequence

from homespec.chatformat.base import (Parsed, Term, ToolCall, arguments_text, call_schema, first_json, lark_json)

TAG = "<|python_tag|>"


class Llama3:
    name = "llama3"
    needs_special = True  # <|python_tag|> is a special token
    reads_reasoning = False

    def parse(self, text: str, final: bool) -> Parsed:
        body = text.strip()
        if body.startswith(TAG):
            body = body[len(TAG):]
        looks_like_call = body.startswith("{") or (TAG.startswith(text.strip()) and text.strip() != "")
        if not final:
            return Parsed("" if looks_like_call or not text.strip() else text)
        calls = read_calls(body) if body.startswith("{") else None
        return Parsed("", tuple(calls)) if calls else Parsed(text)

    def call_grammar(self, tools: Sequence[dict[str, Any]], parallel: bool, term: Term) -> str:
        start = 'call ("; " call)*' if parallel else "call"
        return f"start: {start}\ncall: {lark_json(call_schema(tools, args_key='parameters'))}\n"


def read_calls(body: str) -> list[ToolCall] | None:
    calls = []
    rest = body
    while rest.strip():
        found = first_json(rest)
        if found is None or not isinstance(found[0], dict) or not isinstance(found[0].get("name"), str):
            return None
        value = found[0]
        calls.append(ToolCall(value["name"], arguments_text(value.get("parameters", value.get("arguments", {})))))
        rest = rest[found[1]:].lstrip().removeprefix(";")
    return calls
