"""An answer as it grows, read into OpenAI's pieces: content, reasoning_content, tool calls.

`Splitter.update(text)` reads the whole answer so far (a parser is cheap beside a decode step)
and returns only what is new since the last call: text released once nothing after it can turn it
into something else (a marker's beginning, a call being written), and the calls as `CallPiece`s:
a call opens (its id and name) once the format says its name and its first argument's key are
certain (`Parsed.writing`), then its arguments grow piece by piece, then it completes; the pieces
of a call join to its final `arguments`, byte for byte. A format that cannot say what of a call is
certain before it closes gives no `writing`, and its calls go out whole: open and complete at once.
`Splitter.last(text, whole)` is the answer's end: a call still being written when the answer was
cut (max_tokens, the context's end) gets no more pieces, only its end, `incomplete`. The pieces
streamed join to the final reading, except whitespace a final reading trims around calls.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from homespec.chatformat.base import Parsed, ToolCall, ToolFormat, Writing
from homespec.chatformat.reasoning import CLOSE, OPEN, split_thinking

WRITING, COMPLETED, INCOMPLETE = "writing", "completed", "incomplete"  # a call's status (the Responses API's)


@dataclass(frozen=True, slots=True)
class CallPiece:
    """A piece of one call. `opens`: its first piece (the id and the name go out with it);
    `arguments`: text added to its arguments; `status`: still `writing`, `completed` (the
    arguments sent are the whole) or `incomplete` (cut: nothing more comes for it)."""

    index: int  # the call's place among the answer's calls
    id: str
    name: str
    arguments: str = ""
    opens: bool = False
    status: str = WRITING


@dataclass(frozen=True, slots=True)
class Delta:
    content: str = ""
    reasoning: str = ""
    calls: tuple[CallPiece, ...] = ()  # those of calls already open first, then those of new calls

    def __bool__(self) -> bool:
        return bool(self.content or self.reasoning or self.calls)

    @property
    def carried(self) -> tuple[CallPiece, ...]:
        """The pieces of calls opened before: they come before any text of this delta."""
        return tuple(p for p in self.calls if not p.opens)

    @property
    def begun(self) -> tuple[CallPiece, ...]:
        """The pieces of calls opening now: they come after its text."""
        return tuple(p for p in self.calls if p.opens)

    @property
    def completed(self) -> tuple[CallPiece, ...]:
        return tuple(p for p in self.calls if p.status == COMPLETED)


class Splitter:
    def __init__(self, fmt: ToolFormat | None, thinking: str = "deepseek", starts_open: bool = False) -> None:
        self.fmt = fmt
        self.thinking = thinking  # none | deepseek | deepseek-legacy (auto is deepseek)
        self.starts_open = starts_open
        self.sent_content = ""
        self.sent_reasoning = ""
        self.sent_calls: list[ToolCall] = []  # complete, with the ids they went out with
        self.opened: list[tuple[str, str]] = []  # (id, name) of each call opened
        self.sent_arguments: list[str] = []  # the arguments sent of each call opened

    def read(self, text: str, final: bool) -> Parsed:
        """The answer so far, read whole."""
        if self.fmt is not None and self.fmt.reads_reasoning:
            return self.fmt.parse(text, final)
        reasoning, rest = ("", text) if self.thinking == "none" else split_thinking(text, self.starts_open, final)
        parsed = self.fmt.parse(rest, final) if self.fmt is not None else Parsed(rest)
        if self.thinking == "deepseek-legacy" and reasoning:  # the block stays in content too
            closed = CLOSE if (final or rest) else ""
            parsed = Parsed(f"{OPEN}{reasoning}{closed}{parsed.content}", parsed.calls, writing=parsed.writing)
        return Parsed(parsed.content, parsed.calls, reasoning or parsed.reasoning, parsed.writing)

    def update(self, text: str, final: bool = False) -> Delta:
        return self._update(text, final, grow=True)

    def last(self, text: str, whole: bool) -> Delta:
        """What the answer's end releases. `whole` False: it was cut, so a call still being written
        gets no more arguments: it ends `incomplete`, and its text is never released as content.
        A call opened that the final reading does not complete (a model that broke its own syntax
        where no grammar held it) ends `incomplete` too."""
        delta = self._update(text, whole, grow=False)
        ends = tuple(CallPiece(i, *self.opened[i], status=INCOMPLETE)
                     for i in range(len(self.sent_calls), len(self.opened)))
        del self.opened[len(self.sent_calls):]
        return Delta(delta.content, delta.reasoning, delta.carried + ends + delta.begun)

    def _update(self, text: str, final: bool, grow: bool) -> Delta:
        parsed = self.read(text, final)
        content = parsed.content if final or self.fmt is None else parsed.content.rstrip()
        new_content = content[len(self.sent_content):] if content.startswith(self.sent_content) else ""
        new_reasoning = ""
        if parsed.reasoning.startswith(self.sent_reasoning):
            new_reasoning = parsed.reasoning[len(self.sent_reasoning):]
        self.sent_content += new_content
        self.sent_reasoning += new_reasoning
        pieces = [self._complete(i, c) for i, c in enumerate(parsed.calls) if i >= len(self.sent_calls)]
        if grow and not final and parsed.writing is not None and len(parsed.calls) == len(self.sent_calls):
            pieces.extend(self._grow(len(parsed.calls), parsed.writing))
        pieces.sort(key=lambda p: p.opens)  # calls already open before the text, new ones after
        return Delta(new_content, new_reasoning, tuple(pieces))

    def _complete(self, i: int, call: ToolCall) -> CallPiece:
        if i < len(self.opened):  # opened while it was written: the rest of its arguments
            sent = self.sent_arguments[i]
            rest = call.arguments[len(sent):] if call.arguments.startswith(sent) else ""
            piece = CallPiece(i, *self.opened[i], rest, status=COMPLETED)
        else:
            self.opened.append((call.id, call.name))
            self.sent_arguments.append("")
            piece = CallPiece(i, call.id, call.name, call.arguments, opens=True, status=COMPLETED)
        self.sent_arguments[i] = call.arguments
        self.sent_calls.append(ToolCall(call.name, call.arguments, piece.id))
        return piece

    def _grow(self, i: int, writing: Writing) -> list[CallPiece]:
        # a trailing U+FFFD is a character whose bytes are not all decoded yet: it may still change
        held = writing.arguments.rstrip("\ufffd")
        if i == len(self.opened):
            self.opened.append(("call_" + secrets.token_hex(12), writing.name))
            self.sent_arguments.append(held)
            return [CallPiece(i, *self.opened[i], held, opens=True)]
        sent = self.sent_arguments[i]
        if len(held) <= len(sent) or not held.startswith(sent):
            return []
        self.sent_arguments[i] = held
        return [CallPiece(i, *self.opened[i], held[len(sent):])]

    def final(self, text: str, whole: bool = True) -> Parsed:
        """The answer read at its end, the calls streamed keeping their ids. `whole` False: the
        answer was cut (max_tokens, the context's end), so what was still being written (a call's
        beginning, a marker's) is left out as a stream leaves it out, not read as text."""
        parsed = self.read(text, whole)
        calls = tuple(ToolCall(c.name, c.arguments, self.opened[i][0]) if i < len(self.opened) else c
                      for i, c in enumerate(parsed.calls))
        content = parsed.content if whole or self.fmt is None else parsed.content.rstrip()  # as update sent it
        return Parsed(content, calls, parsed.reasoning)
