"""A Responses API answer: the `response` object and its stream of typed events.

Streamed, an answer is a series of output items, each opened, filled and closed in order:

    response.created, response.in_progress
    [reasoning]      response.output_item.added, response.reasoning_text.delta..., .done, response.output_item.done
    [message]        response.output_item.added, response.content_part.added, response.output_text.delta...,
                     response.output_text.done, response.content_part.done, response.output_item.done
    [function_call]  response.output_item.added, response.function_call_arguments.delta / .done, response.output_item.done
    response.completed (its status `incomplete` when max_output_tokens or the context ended the answer)

Each event is `event: TYPE` and `data: {"type": TYPE, "sequence_number": n, ...}`; no `[DONE]`.
"""

from __future__ import annotations

import json
import secrets
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Sequence

from fastapi.responses import JSONResponse, Response

from homespec.chatformat.split import WRITING, CallPiece, Delta
from homespec.engine.responses import Finish, TextDelta
from homespec.server import answers
from homespec.server.outputs import ChatOutput

if TYPE_CHECKING:
    from starlette.requests import Request

    from homespec.chatformat import ToolCall
    from homespec.engine.api import Handle


class ResponsesOutput(ChatOutput):
    """`names`: a namespace tool's flat names -> (namespace, name), as the calls go out; `keep`: stores
    the finished response (None: store: false, or storing is off)."""

    def __init__(self, answer, tok, turn, fields: dict[str, Any], names: dict[str, tuple[str, str]] | None = None,
                 keep: Callable[[dict[str, Any]], bool] | None = None) -> None:
        super().__init__(answer, tok, turn)
        self.fields = fields
        self.names = names or {}
        self.keep = keep
        self.seq = 0
        self.output: list[dict[str, Any]] = []  # closed items
        self.open: dict[str, Any] | None = None  # the item being streamed

    # --- whole ---------------------------------------------------------------------------------

    async def whole(self, handle: "Handle", request: "Request") -> Response:
        fin = await answers.ended(handle, request, self)
        if fin is None:
            return Response(status_code=499)  # nobody left to read it
        parsed = self.parsed(fin)
        items = []
        if parsed.reasoning:
            items.append(_reasoning(_id("rs"), parsed.reasoning))
        if parsed.content or not parsed.calls:
            items.append(_message(_id("msg"), parsed.content, "completed"))
        items.extend(_call("fc_" + c.id.removeprefix("call_"), c, c.arguments, "completed", self.names)
                     for c in parsed.calls)
        return JSONResponse(self._stored(self.response(fin, items, self._reasoning_tokens(parsed.reasoning))))

    def _stored(self, body: dict[str, Any]) -> dict[str, Any]:
        """The finished response, stored when the request asked (and the store took it)."""
        if self.keep is not None:
            body["store"] = self.keep(body)  # False where the store could not take it
        return body

    def response(self, fin: Finish | None, items: list[dict[str, Any]], thought: int = 0) -> dict[str, Any]:
        incomplete = fin is not None and fin.finish in ("length", "context")
        status = "in_progress" if fin is None else "incomplete" if incomplete else "completed"
        f = self.fields
        body = {"id": "resp_" + self.answer.id, "object": "response", "created_at": self.answer.created,
                "status": status, "model": self.answer.model, "output": items, "error": None,
                "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
                "instructions": f.get("instructions"), "max_output_tokens": f.get("max_output_tokens"),
                "temperature": f.get("temperature", 1.0), "top_p": f.get("top_p", 1.0),
                "parallel_tool_calls": f.get("parallel_tool_calls", True), "tool_choice": f.get("tool_choice", "auto"),
                "tools": f.get("tools", []), "text": f.get("text", {"format": {"type": "text"}}),
                "metadata": f.get("metadata", {}), "store": self.keep is not None, "usage": None,
                "previous_response_id": f.get("previous_response_id")}
        if fin is not None:
            prompt, out = len(fin.prompt_token_ids), len(fin.token_ids)
            body["usage"] = {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": fin.cached_tokens},
                             "output_tokens": out, "output_tokens_details": {"reasoning_tokens": thought},
                             "total_tokens": prompt + out}
        return body

    # --- streamed ------------------------------------------------------------------------------

    async def events(self, handle: "Handle", request: "Request") -> AsyncIterator[str]:
        yield self._event("response.created", response=self.response(None, []))
        yield self._event("response.in_progress", response=self.response(None, []))
        async for batch in answers.follow(handle, request):
            out: list[str] = []
            for r in batch:
                if isinstance(r, TextDelta):
                    self.take(r)
                    piece = self.splitter.update(self._source(), False) if self.splitter is not None else Delta(r.text)
                    out.extend(self._pieces(piece))
                elif isinstance(r, Finish):
                    out.extend(self._end(handle, request, r))
            if out:
                yield "".join(out)

    def _end(self, handle: "Handle", request: "Request", fin: Finish) -> list[str]:
        if (err := answers._failure(handle, fin)) is not None:  # OpenAI's ending of a failed stream
            failed = {**self.response(None, self.output), "status": "failed",
                      "error": {"code": err.code or "server_error", "message": err.message}}
            return [self._event("error", code=err.code, message=err.message, param=None),
                    self._event("response.failed", response=failed)]
        answers._log_answer(request, fin)
        out = self._pieces(self.last(fin))
        out.extend(self._close())
        thought = self._reasoning_tokens(self.splitter.sent_reasoning if self.splitter is not None else "")
        body = self._stored(self.response(fin, self.output, thought))
        # response.completed whatever the status says (incomplete at max_output_tokens): the official
        # client's stream helper waits for it and for no other ending
        return out + [self._event("response.completed", response=body)]

    def _pieces(self, piece: Delta) -> list[str]:
        out = self._calls(piece.carried)
        if piece.reasoning:
            out.extend(self._opened("reasoning"))
            self.open["text"] += piece.reasoning
            out.append(self._event("response.reasoning_text.delta", **self._at(), delta=piece.reasoning))
        if piece.content:
            out.extend(self._opened("message"))
            self.open["text"] += piece.content
            out.append(self._event("response.output_text.delta", **self._at(), delta=piece.content, logprobs=[]))
        return out + self._calls(piece.begun)

    def _calls(self, pieces: Sequence[CallPiece]) -> list[str]:
        """A function_call item per call: added with empty arguments, the arguments piece by piece,
        then `.done` and the item done (a cut call: the item done `incomplete`, with the arguments
        it had, and no `.done`)."""
        out: list[str] = []
        for p in pieces:
            if p.opens:
                out.extend(self._close())
                self.open = {"kind": "function_call", "id": "fc_" + p.id.removeprefix("call_"), "text": "",
                             "call": p}
                item = _call(self.open["id"], p, "", "in_progress", self.names)
                out.append(self._event("response.output_item.added", output_index=len(self.output), item=item))
            if p.arguments:
                self.open["text"] += p.arguments
                out.append(self._event("response.function_call_arguments.delta", item_id=self.open["id"],
                                       output_index=len(self.output), delta=p.arguments))
            if p.status != WRITING:
                out.extend(self._close(p.status))
        return out
    def _opened(self, kind: str) -> list[str]:
        """Open an item of `kind` (closing another first)."""
        if self.open is not None and self.open["kind"] == kind:
            return []
        out = self._close()
        self.open = {"kind": kind, "id": _id("rs" if kind == "reasoning" else "msg"), "text": ""}
        index = len(self.output)
        if kind == "reasoning":
            return out + [self._event("response.output_item.added", output_index=index,
                                      item={"id": self.open["id"], "type": "reasoning", "summary": [], "content": []})]
        return out + [self._event("response.output_item.added", output_index=index,
                                  item=_message(self.open["id"], "", "in_progress", parts=False)),
                      self._event("response.content_part.added", **self._at(), part=_part(""))]

    def _close(self, status: str | None = None) -> list[str]:
        """Close the item open. A function_call closed by anything but its own end (its status) was
        not completed: another item opening, the answer ending, close it `incomplete`."""
        if self.open is None:
            return []
        item, text, self.open = self.open, self.open["text"], None
        status = status or ("incomplete" if item["kind"] == "function_call" else "completed")
        at = {"item_id": item["id"], "output_index": len(self.output), "content_index": 0}
        if item["kind"] == "function_call":
            done = _call(item["id"], item["call"], text, status, self.names)
            out = [self._event("response.function_call_arguments.done", item_id=item["id"],
                               output_index=len(self.output), arguments=text)] if status == "completed" else []
        elif item["kind"] == "reasoning":
            done = _reasoning(item["id"], text)
            out = [self._event("response.reasoning_text.done", **at, text=text)]
        else:
            done = _message(item["id"], text, "completed")
            out = [self._event("response.output_text.done", **at, text=text, logprobs=[]),
                   self._event("response.content_part.done", **at, part=_part(text))]
        out.append(self._event("response.output_item.done", output_index=len(self.output), item=done))
        self.output.append(done)
        return out

    def _at(self) -> dict[str, Any]:
        return {"item_id": self.open["id"], "output_index": len(self.output), "content_index": 0}

    def _event(self, kind: str, **fields: Any) -> str:
        body = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return f"event: {kind}\ndata: {json.dumps(body, ensure_ascii=False)}\n\n"


def _id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


def _part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _message(item_id: str, text: str, status: str, parts: bool = True) -> dict[str, Any]:
    return {"id": item_id, "type": "message", "status": status, "role": "assistant",
            "content": [_part(text)] if parts else []}


def _reasoning(item_id: str, text: str) -> dict[str, Any]:
    return {"id": item_id, "type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": text}]}


def _call(item_id: str, call: "ToolCall | CallPiece", arguments: str, status: str,
          names: dict[str, tuple[str, str]]) -> dict[str, Any]:
    """A call as a function_call item; a namespace tool's function with its `namespace` and its own
    name, as the client declared them."""
    item = {"id": item_id, "type": "function_call", "status": status, "call_id": call.id, "name": call.name,
            "arguments": arguments}
    if call.name in names:
        item["namespace"], item["name"] = names[call.name]
    return item
