"""Mistral calls, after the `[TOOL_CALLS]` special token: a JSON list (Mistral 7B v0.3, Nemo, Small)

    [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]

or, in the newer templates (Magistral, Devstral, Mistral Small 3.2), one `name[ARGS]{...}` per call:

    [TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}
"""

from __future__ import annotations

from typing import Any, Sequence

from homespec.chatformat import partial
from homespec.chatformat.base import Parsed, Term, ToolCall, Writing, call_schema, held_prefix, lark_json

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
        calls, writing, whole = _read(text, at)
        if not final:
            return Parsed(text[:at], tuple(calls), writing=writing)
        if not whole or not calls:
            return Parsed(text)
        return Parsed(text[:at].strip(), tuple(calls))

    def call_grammar(self, tools: Sequence[dict[str, Any]], parallel: bool, term: Term) -> str:
        items = {"type": "array", "items": call_schema(tools, at="/items"), "minItems": 1}
        if not parallel:
            items["maxItems"] = 1
        return f"start: {term(MARK)} calls\ncalls: {lark_json(items)}\n"


def _read(text: str, at: int) -> tuple[list[ToolCall], Writing | None, bool]:
    """The calls after each `[TOOL_CALLS]` from `at` on: the complete ones, the one being written,
    and whether all of it reads as calls."""
    calls: list[ToolCall] = []
    pieces = text[at:].split(MARK)[1:]
    for n, piece in enumerate(pieces):
        last = n == len(pieces) - 1
        found, writing, whole = _named(piece) if ARGS in piece else _listed(piece)
        calls.extend(found)
        if not whole:
            return calls, writing if last else None, False
    return calls, None, True


def _named(piece: str) -> tuple[list[ToolCall], Writing | None, bool]:
    """`name[ARGS]{...}`."""
    name, _, args = piece.partition(ARGS)
    found = partial.value_at(args, 0)
    if found is not None:  # what follows a call's JSON is not read (as before the next [TOOL_CALLS])
        return [ToolCall(name.strip(), found[0])], None, True
    held = partial.object_so_far(args, 0)
    return [], Writing(name.strip(), held) if held is not None else None, False


def _listed(piece: str) -> tuple[list[ToolCall], Writing | None, bool]:
    """`[{"name": ..., "arguments": {...}}, ...]` (or one object)."""
    start = partial.skip(piece, 0)
    items, end = partial.elements(piece, start) if piece.startswith("[", start) else ([(start, None)], None)
    calls: list[ToolCall] = []
    for item_start, _ in items:
        reading = partial.read_call(piece, item_start, argument_keys=("arguments",))
        if reading.call is None:
            return calls, reading.writing, False
        calls.append(reading.call)
        if not piece.startswith("[", start):
            end = reading.end
    return calls, None, end is not None
