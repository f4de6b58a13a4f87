"""An Anthropic Messages answer: the `message` object and its stream of events.

Whole, a `message` whose `content` holds a `thinking` block (when the request enabled thinking and
the model thought), a `text` block, and a `tool_use` block per call. Streamed:

    message_start (the message, content empty), ping
    per block: content_block_start, content_block_delta... (text_delta, thinking_delta,
               input_json_delta), content_block_stop
    message_delta (stop_reason, stop_sequence, usage), message_stop

each as `event: TYPE` + `data: {"type": TYPE, ...}`. stop_reason: `end_turn` (the model ended),
`tool_use` (it ended after calls), `stop_sequence` (with the one met), `max_tokens`,
`model_context_window_exceeded` (the context's end). usage: `input_tokens` the prompt tokens
processed, `cache_read_input_tokens` those a slot's cache held (Anthropic counts them apart),
`output_tokens`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, AsyncIterator, Sequence

from fastapi.responses import JSONResponse, Response

from homespec.chatformat.split import COMPLETED, WRITING, CallPiece, Delta
from homespec.engine.responses import Finish, TextDelta
from homespec.server import answers
from homespec.server.errors import anthropic_error
from homespec.server.outputs import ChatOutput

if TYPE_CHECKING:
    from starlette.requests import Request

    from homespec.chatformat import ToolCall
    from homespec.engine.api import Handle

STOP_REASONS = {"eos": "end_turn", "stop": "stop_sequence", "length": "max_tokens",
                "context": "model_context_window_exceeded", None: "end_turn"}


class MessagesOutput(ChatOutput):
    """`thinks`: the request enabled thinking (else the model's thinking is not returned);
    `stops`: its stop_sequences (to say which one ended the answer)."""

    def __init__(self, answer, tok, turn, thinks: bool, stops: tuple[str, ...]) -> None:
        super().__init__(answer, tok, turn)
        self.thinks, self.stops = thinks, stops
        self.id = "msg_" + answer.id
        self.blocks = 0  # blocks closed
        self.open: str | None = None  # the kind of the block being streamed

    # --- whole ---------------------------------------------------------------------------------

    async def whole(self, handle: "Handle", request: "Request") -> Response:
        fin = await answers.ended(handle, request, self)
        if fin is None:
            return Response(status_code=499)  # nobody left to read it
        parsed = self.parsed(fin)
        content: list[dict[str, Any]] = []
        if parsed.reasoning and self.thinks:
            content.append({"type": "thinking", "thinking": parsed.reasoning, "signature": ""})
        if parsed.content:
            content.append({"type": "text", "text": parsed.content})
        content.extend(_tool_use(c) for c in parsed.calls)
        return JSONResponse({**self.message(content), **self.ending(fin, bool(parsed.calls)),
                             "usage": self.usage(fin)})

    def message(self, content: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.answer.model,
                "content": content, "stop_reason": None, "stop_sequence": None}

    def ending(self, fin: Finish, called: bool) -> dict[str, Any]:
        reason = STOP_REASONS.get(fin.finish, "end_turn")
        reason = "tool_use" if called and reason == "end_turn" else reason
        return {"stop_reason": reason, "stop_sequence": self._stop_met(fin) if reason == "stop_sequence" else None}

    def usage(self, fin: Finish | None, prompt: int = 0) -> dict[str, Any]:
        if fin is None:
            return {"input_tokens": prompt, "output_tokens": 0}
        return {"input_tokens": len(fin.prompt_token_ids) - fin.cached_tokens, "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": fin.cached_tokens, "output_tokens": len(fin.token_ids)}

    def _stop_met(self, fin: Finish) -> str | None:
        """Which stop sequence ended the answer: the one the whole decoded answer has where its text ends."""
        full = self.tok.decode(list(fin.token_ids))
        met = next((s for s in self.stops if full.startswith(s, len(fin.text))), None)
        return met if met is not None else next((s for s in self.stops if s in full), None)

    # --- streamed ------------------------------------------------------------------------------

    async def events(self, handle: "Handle", request: "Request", prompt: int) -> AsyncIterator[str]:
        first = True
        async for batch in answers.follow(handle, request):
            out: list[str] = []
            if first:  # once the engine has read the prompt, as chat's first chunk
                out += [_event("message_start", message={**self.message([]), "usage": self.usage(None, prompt)}),
                        _event("ping")]
                first = False
            for r in batch:
                if isinstance(r, TextDelta):
                    self.take(r)
                    out.extend(self._pieces(self.splitter.update(self._source(), False)
                                            if self.splitter is not None else Delta(r.text)))
                elif isinstance(r, Finish):
                    out.extend(self._end(handle, request, r))
            if out:
                yield "".join(out)

    def _end(self, handle: "Handle", request: "Request", fin: Finish) -> list[str]:
        if (err := answers._failure(handle, fin)) is not None:
            return [_event("error", error=anthropic_error(err)["error"])]
        answers._log_answer(request, fin)
        out = self._pieces(self.last(fin)) + self._close()
        usage = self.usage(fin)
        return out + [_event("message_delta", delta=self.ending(fin, self.calls_sent > 0), usage=usage),
                      _event("message_stop")]

    def _pieces(self, piece: Delta) -> list[str]:
        out = self._calls(piece.carried)
        if piece.reasoning and self.thinks:
            out += self._opened("thinking", {"type": "thinking", "thinking": "", "signature": ""})
            out.append(_event("content_block_delta", index=self.blocks,
                              delta={"type": "thinking_delta", "thinking": piece.reasoning}))
        if piece.content:
            out += self._opened("text", {"type": "text", "text": ""})
            out.append(_event("content_block_delta", index=self.blocks,
                              delta={"type": "text_delta", "text": piece.content}))
        return out + self._calls(piece.begun)

    def _calls(self, pieces: Sequence[CallPiece]) -> list[str]:
        """A tool_use block per call: started with an empty input, its arguments' JSON text piece by
        piece as `input_json_delta`, stopped when the call is complete (or cut)."""
        out: list[str] = []
        for p in pieces:
            if p.opens:
                out += self._opened("tool_use", {"type": "tool_use", "id": "toolu_" + p.id.removeprefix("call_"),
                                                 "name": p.name, "input": {}}, again=True)
            if p.arguments:
                out.append(_event("content_block_delta", index=self.blocks,
                                  delta={"type": "input_json_delta", "partial_json": p.arguments}))
            if p.status != WRITING:
                out += self._close()
                self.calls_sent += p.status == COMPLETED
        return out

    def _opened(self, kind: str, block: dict[str, Any], again: bool = False) -> list[str]:
        """Start a block of `kind` unless one is open (`again`: a new one whatever is open)."""
        if self.open == kind and not again:
            return []
        out = self._close()
        self.open = kind
        return out + [_event("content_block_start", index=self.blocks, content_block=block)]

    def _close(self) -> list[str]:
        if self.open is None:
            return []
        self.open = None
        self.blocks += 1
        return [_event("content_block_stop", index=self.blocks - 1)]


def _event(kind: str, **fields: Any) -> str:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **fields}, ensure_ascii=False)}\n\n"


def _tool_use(call: "ToolCall") -> dict[str, Any]:
    try:
        arguments = json.loads(call.arguments)
    except ValueError:
        arguments = {}
    return {"type": "tool_use", "id": "toolu_" + call.id.removeprefix("call_"), "name": call.name,
            "input": arguments if isinstance(arguments, dict) else {}}
