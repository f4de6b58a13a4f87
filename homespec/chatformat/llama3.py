"""Llama 3.1 / 3.2 / 3.3 JSON calls: the whole answer is the call (after `<|python_tag|>` when the
model uses it), several separated by `;`:

    {"name": "get_weather", "parameters": {"city": "Paris"}}

An answer that does not begin with a call is content; after the calls, what does not read as one
is content.
"""

from __future__ import annotations

from typing import Any, Sequence

from homespec.chatformat import partial
from homespec.chatformat.base import Parsed, Term, ToolCall, Writing, call_schema, lark_json

TAG = "<|python_tag|>"


class Llama3:
    name = "llama3"
    needs_special = True  # <|python_tag|> is a special token
    reads_reasoning = False

    def parse(self, text: str, final: bool) -> Parsed:
        at = len(text) - len(text.lstrip())
        if text.startswith(TAG, at):
            at += len(TAG)
        body = text[at:].strip()
        looks_like_call = body.startswith("{") or (TAG.startswith(text.strip()) and text.strip() != "")
        if not final:
            if not looks_like_call and text.strip():
                return Parsed(text)
            calls, writing, _ = read_calls(text, at)
            return Parsed("", tuple(calls), writing=writing)
        calls, _, stop = read_calls(text, at) if body.startswith("{") else ([], None, at)
        # The calls read stay calls and only what does not read as one after them is content, as
        # llama.cpp's parser reads these answers (common/chat.cpp, parse_json_tool_calls: the calls
        # it found, then the rest as content): a call streamed as complete is never taken back.
        return Parsed(text[stop:].strip(), tuple(calls)) if calls else Parsed(text)

    def call_grammar(self, tools: Sequence[dict[str, Any]], parallel: bool, term: Term) -> str:
        start = 'call ("; " call)*' if parallel else "call"
        return f"start: {start}\ncall: {lark_json(call_schema(tools, args_key='parameters'))}\n"


def read_calls(text: str, pos: int) -> tuple[list[ToolCall], Writing | None, int]:
    """The calls from `pos` on, separated by `;`: the complete ones, the one being written, and
    where what reads as calls stops (the text's end when all of it does)."""
    calls: list[ToolCall] = []
    while (pos := partial.skip(text, pos)) < len(text):
        reading = partial.read_call(text, pos)
        if reading.end is None or reading.call is None:
            return calls, reading.writing, pos
        calls.append(reading.call)
        pos = partial.skip(text, reading.end)
        if text.startswith(";", pos):
            pos += 1
        elif pos < len(text):
            return calls, None, pos
    return calls, None, len(text)
