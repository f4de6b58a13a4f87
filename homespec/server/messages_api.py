"""Anthropic's Messages API (what the Anthropic SDK and Claude Code speak) over the chat path.

    POST /v1/messages               a request read as chat (homespec/server/messages_in.py), answered
                                    as a `message` or its events (homespec/server/messages_out.py)
    POST /v1/messages/count_tokens  {"input_tokens": N}: the prompt the same request would make

One request model under both APIs: the same template, tool formats (the generic one for templates
without tools), grammar, reasoning split, prompt reuse and speculation as /v1/chat/completions.
Errors are Anthropic's shape (homespec/server/errors.py); the key may come as `x-api-key`
(homespec/server/guard.py). The `anthropic-version` and `anthropic-beta` headers are accepted and
not read: this server speaks one version of the API.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
from fastapi import APIRouter, Request

from homespec.server import answers
from homespec.server.answers import AnswerStream
from homespec.server.chat import ChatSettings, prepare
from homespec.server.messages_in import MessagesRequest, chat_request
from homespec.server.messages_out import MessagesOutput
from homespec.server.shapes import Answer

if TYPE_CHECKING:
    from homespec.engine.core import Engine


def messages_routes(engine: "Engine", model_name: str, chat: ChatSettings | None,
                    defaults: answers.Defaults = answers.Defaults()) -> APIRouter:
    """`defaults`: the server's sampling where a request leaves it out (max_tokens is required here)."""
    router = APIRouter()
    settings = chat or ChatSettings(None, False)

    @router.post("/v1/messages")
    async def messages(body: MessagesRequest, request: Request):
        as_chat = chat_request(body)
        turn = await anyio.to_thread.run_sync(prepare, engine.tokenizer, settings, as_chat)
        # max_tokens is required, and clients ask for far more than a local context holds (Claude Code
        # 32k): a bound, met at the context's end (stop_reason model_context_window_exceeded), not a 400
        req = answers.engine_request(engine, as_chat, turn.ids, None, "messages", grammar=turn.grammar,
                                     default=as_chat.wanted_tokens(), defaults=defaults)
        out = MessagesOutput(Answer("chat", model_name), engine.tokenizer, turn, body.thinks, as_chat.stops())
        handle = answers.submit(engine, req)
        if body.stream:
            return AnswerStream(handle, out.events(handle, request, len(turn.ids)), media_type="text/event-stream",
                                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        return await out.whole(handle, request)

    @router.post("/v1/messages/count_tokens")
    async def count_tokens(body: MessagesRequest):
        turn = await anyio.to_thread.run_sync(prepare, engine.tokenizer, settings, chat_request(body, counting=True))
        return {"input_tokens": len(turn.ids)}

    return router
