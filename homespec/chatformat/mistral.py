"""Mistral calls, after the `[TOOL_CALLS]` special token: a JSON list (Mistral 7B v0.3, Nemo, Small)

    [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]

or, in the newer templates (Magistral, Devstral, Mistral Small 3.2), one `name[ARGS]{...}` per call:

    [TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}
"""

from __future__ import annotations

from typing import Any, Sequence

from homespec.chatformat.base import (Parsed, Term, ToolCall, arguments_text, call_schema, first_json, held_prefix,
                                      lark_json)

MARK, ARGS = "[TOOL_CALLS]", "[ARGS]"


class Mistral:
    name = "mistral"
    needs_special = True
    reads_reasoning = False

    def parse(self, text: str, final: bool) -> Parsed:
        at = text.find(MARK)
        if at < 0:
            keep = text if final else text[:len(text) - held_prefix(text, [MARK])]
            return Parsed(keep)
        content = text[:at]
        if not final:
            return Parsed(content)
        calls = _read(text[at:])
        if calls is None:
            return Parsed(text)
        return Parsed(content.strip(), tuple(calls))

    def call_grammar(self, tools: Sequence[dict[str, Any]], parallel: bool, term: Term) -> str:
        items = {"type": "array", "items": call_schema(tools, at="/items"), "minItems": 1}
        if not parallel:
            items["maxItems"] = 1
        return f"start: {term(MARK)} calls\ncalls: {lark_json(items)}\n"


def _read(text: str) -> list[ToolCall] | None:
    calls: list[ToolCall] = []
    for piece in text.split(MARK)[1:]:
        if ARGS in piece:  # name[ARGS]{...}
            name, _, args = piece.partition(ARGS)
            found = first_json(args)
            if found is None:
                return None
            calls.append(ToolCall(name.strip(), arguments_text(found[0])))
            continue
        found = first_json(piece)
        if found is None:
            return None
        items = found[0] if isinstance(found[0], list) else [found[0]]
        for item in items:
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                return None
            calls.append(ToolCall(item["name"], arguments_text(item.get("arguments", {}))))
    return calls or None
