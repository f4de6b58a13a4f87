"""An answer as it grows, read into OpenAI's pieces: content, reasoning_content, tool calls.

`Splitter.update(text)` reads the whole answer so far (a parser is cheap beside a decode step)
and returns only what is new since the last call: text released once nothing after it can turn it
into something else (a marker's beginning, a call being written), and the calls as `CallPiece`s:
a call opens (its id and name) once the format says its name and its first argument's key are
certain (`Parsed.writing`), then its arguments grow piece by piece, then it completes; the pieces
of a call join to its final `arguments`, byte for byte. A format that cannot say what of a call is
certain before it closes gives no `writing`, and its calls go out whole: open and complete at once.
`Splitter.last(text, whole)` is the answer's end: a call still being written when the answer was
cut (max_tokens, the context's end) gets no more pieces, only its end, `incomplete`; so does a call
opened that a later reading no longer has (its markup failed to close: it is content now), told
by its place in the answer where the format says it. An index is one call's, never given to
another. The pieces streamed join to the final reading (its calls, their ids, its content), except
whitespace a final reading trims around calls: the formats' final readings keep the calls they read.
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


@dataclass(slots=True)
class _Open:
    """A call opened while it is written and not complete yet."""

    index: int
    id: str
    name: str
    sent: str  # its arguments sent so far
    at: int  # where its markup begins in the answer (-1: the format does not say)

    def continues(self, name: str, arguments: str, at: int) -> bool:
        """A call read (complete, or its certain beginning) is this one: at the same place in the
        text where the format says, the same name, arguments that go on from those sent. Anything
        else means the reading no longer has this call (it failed to close: its text is content),
        whatever its place in the list of calls."""
        same_place = at == self.at or at < 0 or self.at < 0
        return same_place and name == self.name and (arguments.startswith(self.sent) or self.sent.startswith(arguments))


class Splitter:
    def __init__(self, fmt: ToolFormat | None, thinking: str = "deepseek", starts_open: bool = False) -> None:
        self.fmt = fmt
        self.thinking = thinking  # none | deepseek | deepseek-legacy (auto is deepseek)
        self.starts_open = starts_open
        self.sent_content = ""
        self.sent_reasoning = ""
        self.sent_calls: list[ToolCall] = []  # complete, in the answer's order, with the ids they went out with
        self.pending: _Open | None = None  # the call being written, opened
        self.slots = 0  # indices given out: one a call, never given again (a call ended incomplete keeps its)

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
        return self._update(text, whole, grow=False)

    def _update(self, text: str, final: bool, grow: bool) -> Delta:
        parsed = self.read(text, final)
        content = parsed.content if final or self.fmt is None else parsed.content.rstrip()
        new_content = content[len(self.sent_content):] if content.startswith(self.sent_content) else ""
        new_reasoning = ""
        if parsed.reasoning.startswith(self.sent_reasoning):
            new_reasoning = parsed.reasoning[len(self.sent_reasoning):]
        self.sent_content += new_content
        self.sent_reasoning += new_reasoning
        pieces: list[CallPiece] = []
        for call in parsed.calls[len(self.sent_calls):]:
            pieces.extend(self._complete(call))
        writing = parsed.writing if grow and not final and len(parsed.calls) == len(self.sent_calls) else None
        if writing is not None:
            pieces.extend(self._grow(writing))
        elif self.pending is not None:  # the reading no longer has the call opened: it ends here
            pieces.append(self._end())
        pieces.sort(key=lambda p: p.opens)  # calls already open before the text, new ones after
        return Delta(new_content, new_reasoning, tuple(pieces))

    def _end(self) -> CallPiece:
        assert self.pending is not None
        p, self.pending = self.pending, None
        return CallPiece(p.index, p.id, p.name, status=INCOMPLETE)

    def _slot(self) -> int:
        self.slots += 1
        return self.slots - 1

    def _complete(self, call: ToolCall) -> list[CallPiece]:
        out = []
        p = self.pending
        if p is not None and p.continues(call.name, call.arguments, call.at):  # the rest of its arguments
            self.pending = None
            piece = CallPiece(p.index, p.id, p.name, call.arguments[len(p.sent):], status=COMPLETED)
        else:
            if p is not None:  # opened, then lost: a call before this one that failed to close
                out.append(self._end())
            piece = CallPiece(self._slot(), call.id, call.name, call.arguments, opens=True, status=COMPLETED)
        self.sent_calls.append(ToolCall(call.name, call.arguments, piece.id))
        return out + [piece]

    def _grow(self, writing: Writing) -> list[CallPiece]:
        # a trailing U+FFFD is a character whose bytes are not all decoded yet: it may still change
        held = writing.arguments.rstrip("\ufffd")
        out = []
        p = self.pending
        if p is not None and not p.continues(writing.name, held, writing.at):
            out.append(self._end())  # the call opened failed; another is being written
            p = None
        if p is None:
            self.pending = _Open(self._slot(), "call_" + secrets.token_hex(12), writing.name, held, writing.at)
            return out + [CallPiece(self.pending.index, self.pending.id, writing.name, held, opens=True)]
        if len(held) <= len(p.sent):
            return out
        piece = CallPiece(p.index, p.id, p.name, held[len(p.sent):])
        p.sent = held
        return out + [piece]

    def final(self, text: str, whole: bool = True) -> Parsed:
        """The answer read at its end, the calls streamed keeping their ids. `whole` False: the
        answer was cut (max_tokens, the context's end), so what was still being written (a call's
        beginning, a marker's) is left out as a stream leaves it out, not read as text."""
        parsed = self.read(text, whole)
        calls = tuple(ToolCall(c.name, c.arguments, self.sent_calls[i].id) if i < len(self.sent_calls) else c
                      for i, c in enumerate(parsed.calls))
        content = parsed.content if whole or self.fmt is None else parsed.content.rstrip()  # as update sent it
        return Parsed(content, calls, parsed.reasoning)
