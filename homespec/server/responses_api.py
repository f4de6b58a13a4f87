"""OpenAI's Responses API (what Codex CLI and the openai-agents SDK speak) over the chat path.

    POST   /v1/responses        a request read as chat (homespec/server/responses_in.py), answered as a
                                `response` object or its typed events (homespec/server/responses_out.py)
    GET    /v1/responses/{id}   a stored response
    DELETE /v1/responses/{id}   forget it

A response is stored (`store`, default true as OpenAI's) in a bounded store (homespec/server/store.py)
with the conversation it ends, so a later request's `previous_response_id` carries that
conversation on: its prompt begins with the same tokens, and the engine's prompt reuse finds them
in a slot's cache.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
from fastapi import APIRouter, Request

from homespec.server import answers
from homespec.server.answers import AnswerStream
from homespec.server.chat import ChatSettings, prepare
from homespec.server.errors import ApiError
from homespec.server.responses_in import ResponsesRequest, answered, chat_request
from homespec.server.responses_out import ResponsesOutput
from homespec.server.shapes import Answer

if TYPE_CHECKING:
    from homespec.engine.core import Engine
    from homespec.server.store import ResponseStore


def responses_routes(engine: "Engine", model_name: str, chat: ChatSettings | None, defaults: answers.Defaults,
                     store: "ResponseStore") -> APIRouter:
    router = APIRouter()

    @router.post("/v1/responses")
    async def responses(body: ResponsesRequest, request: Request):
        owner = store.owner(request.headers)
        earlier = ()
        if body.previous_response_id is not None:
            found = store.get(owner, body.previous_response_id)
            if found is None:
                raise ApiError(400, f"previous_response_id: no stored response '{body.previous_response_id}' (never "
                               "stored, deleted, or dropped from the store, which keeps the most recent "
                               f"{store.max_count})", param="previous_response_id", code="previous_response_not_found")
            earlier = found.messages
        reading = chat_request(body, earlier)
        as_chat = reading.chat
        turn = await anyio.to_thread.run_sync(prepare, engine.tokenizer, chat or ChatSettings(None, False), as_chat)
        req = answers.engine_request(engine, as_chat, turn.ids, as_chat.wanted_tokens(), "input", grammar=turn.grammar,
                                     default=defaults.max_tokens, defaults=defaults)
        keep = None
        if body.store is not False and store.enabled:
            def keep(response: dict) -> bool:
                return store.put(owner, response, [*earlier, *reading.new, *answered(response["output"])])
        out = ResponsesOutput(Answer("chat", model_name), engine.tokenizer, turn, body.model_dump(exclude_none=True),
                              names=reading.names, keep=keep)
        handle = answers.submit(engine, req)
        if body.stream:
            return AnswerStream(handle, out.events(handle, request), media_type="text/event-stream",
                                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        return await out.whole(handle, request)

    @router.get("/v1/responses/{response_id}")
    async def stored(response_id: str, request: Request):
        found = store.get(store.owner(request.headers), response_id)
        if found is None:
            raise _not_found(response_id)
        return found.response

    @router.delete("/v1/responses/{response_id}")
    async def forget(response_id: str, request: Request):
        if not store.delete(store.owner(request.headers), response_id):
            raise _not_found(response_id)
        return {"id": response_id, "object": "response", "deleted": True}

    return router


def _not_found(response_id: str) -> ApiError:
    return ApiError(404, f"no stored response '{response_id}'", param="response_id", code="not_found")
