"""The two completion routes: a body in, the engine's answer out, whole or streamed.

    POST /v1/chat/completions   messages (and tools) through the chat template; the answer read
                                into content, reasoning_content and tool_calls (homespec/server/chat.py)
    POST /v1/completions        a plain prompt; legacy logprobs and echo
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from homespec.server import answers, constrain
from homespec.server.answers import AnswerStream
from homespec.server.chat import ChatSettings, prepare
from homespec.server.outputs import ChatOutput, TextOutput
from homespec.server.schemas import ChatRequest, CompletionRequest
from homespec.server.shapes import Answer

if TYPE_CHECKING:
    from homespec.engine.api import EngineRequest
    from homespec.engine.core import Engine
    from homespec.server.answers import Output
    from homespec.server.schemas import Sampling


def completion_routes(engine: "Engine", model_name: str, chat: ChatSettings | None,
                      defaults: answers.Defaults = answers.Defaults()) -> APIRouter:
    """`defaults`: what a request leaves out (serve's flags): without --max-tokens a chat answer may
    run to the context's end and a text completion gets OpenAI's default, 16."""
    max_tokens = defaults.max_tokens
    router = APIRouter()

    @router.post("/v1/chat/completions")
    async def chat_completions(body: ChatRequest, request: Request):
        turn = await anyio.to_thread.run_sync(prepare, engine.tokenizer, chat or ChatSettings(None, False), body)
        top = (body.top_logprobs or 0) if body.logprobs else None
        req = answers.engine_request(engine, body, turn.ids, body.wanted_tokens(), "messages", grammar=turn.grammar,
                                     logprobs=top, default=max_tokens, defaults=defaults)
        out = ChatOutput(Answer("chat", model_name), engine.tokenizer, turn, scored=top is not None)
        return await respond(engine, request, body, req, out)

    @router.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request):
        ids = await anyio.to_thread.run_sync(answers.text_ids, engine, body)
        grammar = await anyio.to_thread.run_sync(constrain.requested, engine.tokenizer, body)
        req = answers.engine_request(engine, body, ids, body.wanted_tokens(), "prompt", grammar=grammar,
                                     logprobs=body.logprobs, default=max_tokens if max_tokens is not None else 16,
                                     defaults=defaults)
        echoed = ids[1:] if ids and ids[0] == engine.tokenizer.bos_id and isinstance(body.prompt[0], str) else ids
        out = TextOutput(Answer("text", model_name), engine.tokenizer, body.logprobs, echoed if body.echo else ())
        return await respond(engine, request, body, req, out)

    return router


async def respond(engine: "Engine", request: Request, body: "Sampling", req: "EngineRequest", out: "Output"):
    """Submit; then the answer as SSE (`stream`) or as one JSON body."""
    handle = answers.submit(engine, req)
    if body.stream:
        usage = body.stream_options is not None and body.stream_options.include_usage
        return AnswerStream(handle, answers.sse(handle, request, out, usage), media_type="text/event-stream",
                            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    result = await answers.whole(handle, request, out)
    return JSONResponse(result) if result is not None else Response(status_code=499)  # nobody left to read it
