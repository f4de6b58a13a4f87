"""One answer's way out: its text read into OpenAI's pieces and shaped as chunks or one body.

ChatOutput reads a chat answer with the Turn's splitter (homespec.chatformat.split) when the turn
offered tools or the template thinks: content, reasoning_content and tool_calls deltas as they
stream, the message at the end, `finish_reason: "tool_calls"` after calls. Without either the text
is the content, chunk for chunk, as before. TextOutput is /v1/completions': the text, the echoed
prompt, the legacy log-probabilities. Both attach the tokens' log-probabilities when asked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from homespec.chatformat import Parsed
from homespec.chatformat.split import COMPLETED, CallPiece, Delta, Splitter
from homespec.server import logprobs as shape_logprobs
from homespec.server.shapes import Answer, chunk, completion

if TYPE_CHECKING:
    from homespec.contracts.backend import Tokenizer
    from homespec.engine.responses import Finish, TextDelta
    from homespec.server.chat import Turn
    from homespec.speculative.logprobs import TokenLogprob


class _Output:
    def __init__(self, answer: Answer, tok: "Tokenizer", scored: bool) -> None:
        self.answer, self.tok = answer, tok
        self.eos = frozenset(tok.eos_ids)
        self.pieces = shape_logprobs.Pieces(tok) if scored else None
        self.parts: list[str] = []
        self.ids: list[int] = []
        self.scores: list["TokenLogprob"] = []
        self.unsent: list["TokenLogprob"] = []

    def take(self, d: "TextDelta") -> None:
        """A piece of the answer (the end-of-generation token has no text and no score shown)."""
        self.parts.append(d.text)
        self.ids.extend(t for t in d.token_ids if t not in self.eos)
        scores = [s for s in d.logprobs if s.token not in self.eos]
        self.scores.extend(scores)
        self.unsent.extend(scores)

    def _flush(self) -> list["TokenLogprob"]:
        out, self.unsent = self.unsent, []
        return out


class ChatOutput(_Output):
    def __init__(self, answer: Answer, tok: "Tokenizer", turn: "Turn", scored: bool = False) -> None:
        super().__init__(answer, tok, scored)
        self.splitter = None if turn.plain else Splitter(turn.fmt, turn.thinking, turn.starts_open)
        self.special = turn.fmt is not None and turn.fmt.needs_special
        self.calls_sent = 0

    def first(self) -> list[dict[str, Any]]:
        return [chunk(self.answer, first=True)]

    def stream(self, d: "TextDelta") -> list[dict[str, Any]]:
        self.take(d)
        if self.splitter is None:
            return [self._chunk(text=d.text)] if d.text else []
        return self._deltas(self.splitter.update(self._source(), final=False))

    def last(self, fin: "Finish") -> Delta:
        """What the answer's end releases. An answer cut inside a call (max_tokens, the context's
        end) releases the complete calls only: the unfinished one is dropped, never sent as text."""
        if self.splitter is None:
            return Delta()
        return self.splitter.last(self._source(fin), whole=not cut(fin))

    def parsed(self, fin: "Finish") -> Parsed:
        """The whole answer read at its end (a cut one as `last` reads it)."""
        if self.splitter is None:
            return Parsed(fin.text)
        return self.splitter.final(self._source(fin), whole=not cut(fin))

    def end(self, fin: "Finish", include_usage: bool) -> list[dict[str, Any]]:
        out = self._deltas(self.last(fin))
        thought = self._reasoning_tokens(self.splitter.sent_reasoning if self.splitter is not None else "")
        out.append(chunk(self.answer, fin=fin, called=self.calls_sent > 0, logprobs=self._logprobs(self._flush())))
        if include_usage:
            out.append(chunk(self.answer, fin=fin, usage_only=True, reasoning_tokens=thought))
        return out

    def body(self, fin: "Finish") -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": fin.text, "refusal": None}
        thought = 0
        if self.splitter is not None:
            parsed = self.parsed(fin)
            message["content"] = parsed.content if parsed.content or not parsed.calls else None
            if parsed.reasoning:
                message["reasoning_content"] = parsed.reasoning
                thought = self._reasoning_tokens(parsed.reasoning)
            if parsed.calls:
                message["tool_calls"] = [_call(c) for c in parsed.calls]
        return completion(self.answer, fin, message=message, logprobs=self._logprobs(self.scores),
                          reasoning_tokens=thought)

    def _source(self, fin: "Finish | None" = None) -> str:
        """The text the splitter reads: with special tokens spelled out where the format's markers are
        special tokens (but an answer a stop string ended is the text cut before it)."""
        if self.special and not (fin is not None and fin.finish == "stop"):
            return self.tok.decode(self.ids, special=True)  # type: ignore[call-arg]
        return "".join(self.parts)

    def _deltas(self, piece: Delta) -> list[dict[str, Any]]:
        out = self._call_deltas(piece.carried)
        if piece.reasoning:
            out.append(self._chunk(delta={"reasoning_content": piece.reasoning}))
        if piece.content:
            out.append(self._chunk(text=piece.content))
        return out + self._call_deltas(piece.begun)

    def _call_deltas(self, pieces: Sequence[CallPiece]) -> list[dict[str, Any]]:
        """OpenAI's shape: a call's index, id, type and name with empty arguments first, then its
        arguments piece by piece (a cut call: no more pieces; the finish reason says `length`)."""
        out = []
        for p in pieces:
            if p.opens:
                opening = {"index": p.index, "id": p.id, "type": "function",
                           "function": {"name": p.name, "arguments": ""}}
                out.append(self._chunk(delta={"tool_calls": [opening]}))
            if p.arguments:
                piece = {"index": p.index, "function": {"arguments": p.arguments}}
                out.append(self._chunk(delta={"tool_calls": [piece]}))
            self.calls_sent += p.status == COMPLETED
        return out

    def _chunk(self, text: str | None = None, delta: dict[str, Any] | None = None) -> dict[str, Any]:
        return chunk(self.answer, text, delta=delta, logprobs=self._logprobs(self._flush()))

    def _logprobs(self, scores: Sequence["TokenLogprob"]) -> dict[str, Any] | None:
        return shape_logprobs.chat(self.pieces, scores) if self.pieces is not None and scores else None

    def _reasoning_tokens(self, reasoning: str) -> int:
        """The thinking's length in tokens (its text tokenized again: within a token of what was emitted)."""
        return len(self.tok.encode(reasoning, add_bos=False)) if reasoning else 0


class TextOutput(_Output):
    def __init__(self, answer: Answer, tok: "Tokenizer", top: int | None, echo: Sequence[int] = ()) -> None:
        super().__init__(answer, tok, top is not None)
        self.top = top or 0
        self.echo_ids = tuple(echo)
        self.echo = tok.decode(list(echo)) if echo else ""
        self.offset = 0  # characters sent, for text_offset

    def first(self) -> list[dict[str, Any]]:
        if not self.echo:
            return []
        scores = self._legacy([], self.echo_ids)
        self.offset = len(self.echo)
        return [chunk(self.answer, self.echo, logprobs=scores)]

    def stream(self, d: "TextDelta") -> list[dict[str, Any]]:
        self.take(d)
        if not d.text:
            return []
        out = chunk(self.answer, d.text, logprobs=self._legacy(self._flush()))
        self.offset += len(d.text)
        return [out]

    def end(self, fin: "Finish", include_usage: bool) -> list[dict[str, Any]]:
        out = [chunk(self.answer, fin=fin, logprobs=self._legacy(self._flush()))]
        if include_usage:
            out.append(chunk(self.answer, fin=fin, usage_only=True))
        return out

    def body(self, fin: "Finish") -> dict[str, Any]:
        self.offset = 0
        return completion(self.answer, fin, text=self.echo + fin.text, logprobs=self._legacy(self.scores, self.echo_ids))

    def _legacy(self, scores: Sequence["TokenLogprob"], echoed: Sequence[int] = ()) -> dict[str, Any] | None:
        if self.pieces is None or not (scores or echoed):
            return None
        return shape_logprobs.legacy(self.pieces, scores, self.offset, echoed, top=self.top > 0)


def cut(fin: "Finish") -> bool:
    """The answer ended because it ran out of room (max_tokens, the context), not by itself."""
    return fin.finish in ("length", "context")


def _call(call) -> dict[str, Any]:
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
