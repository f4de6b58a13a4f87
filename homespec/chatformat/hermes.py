"""Hermes-style calls (Qwen 2.5 / 3, Hermes 2 / 3, SmolLM3 and the ChatML templates modelled on them):

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

one block per call; the text outside the blocks is the answer's content.
"""

from __future__ import annotations

from typing import Any, Sequence

from homespec.chatformat import partial
from homespec.chatformat.base import (Parsed, Term, ToolCall, Writing, call_schema, held_prefix, lark_json,
                                      lark_string)

OPEN, CLOSE = "<tool_call>", "</tool_call>"


class Hermes:
    name = "hermes"
    needs_special = False
    reads_reasoning = False

    def __init__(self, open_: str = OPEN, close: str = CLOSE) -> None:
        self.open, self.close = open_, close

    def parse(self, text: str, final: bool) -> Parsed:
        content: list[str] = []
        calls: list[ToolCall] = []
        pos = 0
        while (start := text.find(self.open, pos)) >= 0:
            content.append(text[pos:start])
            end = text.find(self.close, start)
            body = text[start + len(self.open):end if end >= 0 else len(text)]
            if end < 0 and not final:  # a call still coming: what of it is certain
                writing = partial.read_call(body).writing
                writing = Writing(writing.name, writing.arguments, start) if writing is not None else None
                return Parsed(_join(content, "", calls, final), tuple(calls), writing=writing)
            call = read_call(body)
            if call is None:
                if end < 0:  # an open block at the end that is no call: text after all
                    return Parsed(_join(content, text[start:], calls, final), tuple(calls))
                content.append(text[start:end + len(self.close)])
            else:
                calls.append(ToolCall(call.name, call.arguments, call.id, start))
            pos = len(text) if end < 0 else end + len(self.close)
        tail = text[pos:]
        if not final:
            tail = tail[:len(tail) - held_prefix(tail, [self.open])]
        content.append(tail)
        return Parsed(_join(content, "", calls, final), tuple(calls))

    def call_grammar(self, tools: Sequence[dict[str, Any]], parallel: bool, term: Term) -> str:
        call = f"{lark_string(self.open + chr(10))} {lark_json(call_schema(tools))} {lark_string(chr(10) + self.close)}"
        start = 'call ("\\n" call)*' if parallel else "call"
        return f"start: {start}\ncall: {call}\n"


def read_call(body: str) -> ToolCall | None:
    """{"name": ..., "arguments": {...}} (or "parameters") -> a call; None if it is not one."""
    reading = partial.read_call(body, partial.skip(body, 0))
    if reading.end is None or body[reading.end:].strip():
        return None
    return reading.call


def _join(parts: list[str], tail: str, calls: list[ToolCall], final: bool) -> str:
    text = "".join(parts) + tail
    return text.strip() if final and calls else text
