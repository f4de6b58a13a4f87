"""Mistral calls, after the `[TOOL_CALLS]` special token: a JSON list (Mistral 7B v0.3, Nemo, Small)

    [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]

or, in the newer templates (Magistral, Devstral, Mistral Small 3.2), one `name[ARGS]{...}` per call:

    [TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}

Read whole, the calls read stay calls and what does not read as one after them is content.
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
        calls, writing, stop = _read(text, at)
        if not final:
            return Parsed(text[:at], tuple(calls), writing=writing)
        if not calls:
            return Parsed(text)
        # the calls read stay calls; only the rest that does not read as one is content, where it
        # stood (as llama.cpp's parsers keep the calls they found): a call streamed is never taken back
        return Parsed((text[:at] + text[stop:]).strip(), tuple(calls))

    def call_grammar(self, tools: Sequence[dict[str, Any]], parallel: bool, term: Term) -> str:
        items = {"type": "array", "items": call_schema(tools, at="/items"), "minItems": 1}
        if not parallel:
            items["maxItems"] = 1
        return f"start: {term(MARK)} calls\ncalls: {lark_json(items)}\n"


def _read(text: str, at: int) -> tuple[list[ToolCall], Writing | None, int]:
    """The calls after each `[TOOL_CALLS]` from `at` on: the complete ones, the one being written,
    and where what reads as calls stops (the text's end when all of it does)."""
    calls: list[ToolCall] = []
    start = at
    pieces = text[at:].split(MARK)[1:]
    for n, piece in enumerate(pieces):
        last = n == len(pieces) - 1
        found, writing, stop = _named(piece) if ARGS in piece else _listed(piece)
        calls.extend(found)
        if stop is not None:  # from `stop` on this piece does not read as calls
            return calls, writing if last else None, start if not found else start + len(MARK) + stop
        start += len(MARK) + len(piece)
    return calls, None, len(text)


def _named(piece: str) -> tuple[list[ToolCall], Writing | None, int | None]:
    """`name[ARGS]{...}`; the last of the three: where it stops reading as a call (None: it all does)."""
    name, _, args = piece.partition(ARGS)
    found = partial.value_at(args, 0)
    if found is not None:  # what follows a call's JSON is not read (as before the next [TOOL_CALLS])
        return [ToolCall(name.strip(), found[0])], None, None
    held = partial.object_so_far(args, 0)
    return [], Writing(name.strip(), held) if held is not None else None, 0


def _listed(piece: str) -> tuple[list[ToolCall], Writing | None, int | None]:
    """`[{"name": ..., "arguments": {...}}, ...]` (or one object)."""
    start = partial.skip(piece, 0)
    listed = piece.startswith("[", start)
    items, end = partial.elements(piece, start) if listed else ([(start, None)], None)
    calls: list[ToolCall] = []
    for item_start, _ in items:
        reading = partial.read_call(piece, item_start, argument_keys=("arguments",))
        if reading.call is None:
            return calls, reading.writing, item_start
        calls.append(reading.call)
        if not listed:
            end = reading.end
    if end is not None:
        return calls, None, None
    return calls, None, items[-1][1] if calls and items[-1][1] is not None else start
