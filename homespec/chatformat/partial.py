"""JSON read while it is written: the members of an object (the items of an array) as far as they
are complete, so a call's name and arguments can stream before the call closes.

A call's `arguments` are the JSON text the model wrote for its arguments object, verbatim (its
span in the answer, not the object dumped again): the text released while the call is written is
then a prefix of the final `arguments` by construction, and the pieces a stream sends join to it
byte for byte. A call is released (`Writing`) only once its name is a complete string and the key
of its first argument is written: before that, the text may still turn out not to be a call.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Sequence

from homespec.chatformat.base import ToolCall, Writing, arguments_text

_WS = " \t\r\n"
_DECODER = json.JSONDecoder()
# a complete object key (a JSON string) and its colon
_KEY = re.compile(r'"((?:[^"\\\x00-\x1f]|\\.)*)"[ \t\r\n]*:[ \t\r\n]*')
# an arguments object whose first key is written: from here on it is an object of arguments
_FIRST_KEY = re.compile(r'\{[ \t\r\n]*"(?:[^"\\\x00-\x1f]|\\.)*"[ \t\r\n]*:')
NAME_KEYS = ("name",)
ARGUMENT_KEYS = ("arguments", "parameters")


@dataclass(frozen=True, slots=True)
class Member:
    key: str
    start: int  # where its value begins
    end: int | None  # where it ends (None: still being written, or not JSON)
    value: Any = None


@dataclass(frozen=True, slots=True)
class Reading:
    """A call object read as far as it is written."""

    call: ToolCall | None  # the object closed and reads as a call
    writing: Writing | None  # its name and the arguments so far, once certain
    end: int | None  # where the object closes (None: not yet, or it does not read as one)


def skip(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _WS:
        pos += 1
    return pos


def members(text: str, pos: int) -> tuple[list[Member], int | None]:
    """The members of the object opening at `pos` (after whitespace) as far as they are written,
    and where it closes (None: not yet, or what follows does not read as the rest of an object)."""
    out: list[Member] = []
    pos = _inside(text, pos, "{")
    if pos is None or text.startswith("}", pos):
        return out, None if pos is None else pos + 1
    while (m := _KEY.match(text, pos)) is not None:
        try:
            key = json.loads(f'"{m.group(1)}"')
            value, end = _DECODER.raw_decode(text, m.end())
        except ValueError:  # a value still being written (or a key with a bad escape: not JSON)
            out.append(Member(m.group(1), m.end(), None))
            return out, None
        out.append(Member(key, m.end(), end, value))
        closed, pos = _after(text, end, "}")
        if closed or pos is None:
            return out, pos
    return out, None


def elements(text: str, pos: int) -> tuple[list[tuple[int, int | None]], int | None]:
    """The items of the array opening at `pos` (after whitespace): (start, end) each, end None for
    the one still being written; and where the array closes (None: not yet)."""
    out: list[tuple[int, int | None]] = []
    pos = _inside(text, pos, "[")
    if pos is None or text.startswith("]", pos):
        return out, None if pos is None else pos + 1
    while pos < len(text):
        try:
            _, end = _DECODER.raw_decode(text, pos)
        except ValueError:
            out.append((pos, None))
            return out, None
        out.append((pos, end))
        closed, pos = _after(text, end, "]")
        if closed or pos is None:
            return out, pos
    return out, None


def _inside(text: str, pos: int, mark: str) -> int | None:
    """Where the first item of the object or array opening with `mark` at `pos` (after whitespace)
    would start; None where it does not open there."""
    pos = skip(text, pos)
    return skip(text, pos + 1) if text.startswith(mark, pos) else None


def _after(text: str, end: int, close: str) -> tuple[bool, int | None]:
    """After an item of an object or array that ends at `end`: (True, past `close`) where the
    container closes there, (False, the next item's start) after a comma, (False, None) else."""
    pos = skip(text, end)
    if text.startswith(close, pos):
        return True, pos + 1
    if not text.startswith(",", pos):
        return False, None
    return False, skip(text, pos + 1)


def read_call(text: str, pos: int = 0, name_keys: Sequence[str] = NAME_KEYS,
              argument_keys: Sequence[str] = ARGUMENT_KEYS) -> Reading:
    """The call object `{"name": ..., "arguments": {...}}` opening at `pos` (after whitespace); its
    arguments under any of `argument_keys` (none: `{}`)."""
    found, end = members(text, pos)
    name = next((m.value for m in found if m.key in name_keys and m.end is not None), None)
    args = next((m for m in found if m.key in argument_keys), None)
    if not isinstance(name, str):
        return Reading(None, None, end)
    writing = Writing(name, held) if args is not None and (held := arguments_so_far(text, args)) is not None \
        else None
    if end is None:
        return Reading(None, writing, None)
    if args is None:
        return Reading(ToolCall(name, "{}"), Writing(name, "{}"), end)
    return Reading(ToolCall(name, arguments_of(text, args)), writing, end)


def arguments_of(text: str, member: Member) -> str:
    """A complete arguments value as the call's `arguments`: an object's own text; anything else
    (a string of JSON, ...) as base.arguments_text reads it."""
    assert member.end is not None
    if isinstance(member.value, dict):
        return text[member.start:member.end]
    return arguments_text(member.value)


def arguments_so_far(text: str, member: Member) -> str | None:
    """The arguments written so far, once they are an object with its first key written (None
    before that, and for a value that is not an object: it goes out whole)."""
    if member.end is not None:
        return text[member.start:member.end] if isinstance(member.value, dict) else None
    held = text[member.start:]
    return held if _FIRST_KEY.match(held) else None


def value_at(text: str, pos: int) -> tuple[str, int] | None:
    """The arguments value at `pos` (after whitespace), complete: (`arguments`, where it ends)."""
    pos = skip(text, pos)
    try:
        value, end = _DECODER.raw_decode(text, pos)
    except ValueError:
        return None
    return (text[pos:end] if isinstance(value, dict) else arguments_text(value)), end


def object_so_far(text: str, pos: int) -> str | None:
    """An arguments object being written at `pos` (after whitespace), once its first key is
    written; a complete object whole."""
    pos = skip(text, pos)
    complete = value_at(text, pos)
    if complete is not None:
        return complete[0] if text.startswith("{", pos) else None
    held = text[pos:]
    return held if _FIRST_KEY.match(held) else None
