"""create_app: the OpenAI-compatible routes over one engine.

    POST /v1/chat/completions   messages through the model's chat template; stream: SSE
    POST /v1/completions        a plain-text prompt (or token ids)
    GET  /v1/models             the one model served, under --alias
    GET  /health                {"status": "ok"} (no key needed)
    GET  /metrics               Prometheus text
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.middleware.cors import CORSMiddleware

from homespec.server import answers, errors, shapes
from homespec.server.guard import Guard
from homespec.server.metrics import registry
from homespec.server.schemas import ChatRequest, CompletionRequest

if TYPE_CHECKING:
    from homespec.engine.api import Handle
    from homespec.engine.core import Engine

MAX_BODY = 8 << 20  # bytes; --max-body-mib
# pages served from this machine may call the API from a browser whatever --cors says (as Ollama
# allows localhost origins by default); another site's page only when --cors names it
LOOPBACK_ORIGINS = r"https?://(localhost|127\.0\.0\.1|\[::1\])(:\d+)?"


class AnswerStream(StreamingResponse):
    """An SSE answer that cancels its handle however the response ends: a client gone before the
    stream's first event never runs the generator, whose own clean-up would otherwise never come
    (the engine would decode the whole answer for nobody). Cancelling a finished answer does nothing."""

    def __init__(self, handle: "Handle", content, **kwargs) -> None:
        super().__init__(content, **kwargs)
        self.handle = handle

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.handle.cancel()


def create_app(engine: "Engine", *, model_name: str, api_key: str | None = None, max_body: int = MAX_BODY,
               cors: tuple[str, ...] = ()):
    """The ASGI app: the routes behind the guard (key, body limit, counts), behind CORS (a
    browser's preflight carries no key, so it is answered before the guard asks for one)."""
    reg, http_count = registry(engine, model_name)
    guarded = Guard(routes(engine, model_name, reg), api_key=api_key, max_body=max_body, count=http_count.add)
    return CORSMiddleware(guarded, allow_origins=list(cors), allow_origin_regex=LOOPBACK_ORIGINS,
                          allow_methods=["GET", "POST"], allow_headers=["*"], max_age=600)


def openapi_schema() -> dict:
    """The OpenAPI schema FastAPI makes of the routes and their pydantic bodies (not served; the
    tests generate requests from it). The routes read no engine until a request comes."""
    from prometheus_client import CollectorRegistry

    return routes(None, "model", CollectorRegistry()).openapi()  # type: ignore[arg-type]


def routes(engine: "Engine", model_name: str, reg) -> FastAPI:
    """The routes over `engine`, with OpenAI's error shape for every failure."""
    app = FastAPI(title="homespec", docs_url=None, redoc_url=None, openapi_url=None)
    errors.install(app)
    created = int(time.time())

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatRequest, request: Request):
        ids = await anyio.to_thread.run_sync(answers.chat_ids, engine, body)
        req = answers.engine_request(engine, body, ids, body.wanted_tokens(), "messages")
        return await _answer(request, body, shapes.Answer("chat", model_name), req)

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request):
        ids = await anyio.to_thread.run_sync(answers.text_ids, engine, body)
        req = answers.engine_request(engine, body, ids, body.wanted_tokens(), "prompt")
        return await _answer(request, body, shapes.Answer("text", model_name), req)

    async def _answer(request: Request, body, answer: shapes.Answer, req):
        handle = answers.submit(engine, req)
        if body.stream:
            usage = body.stream_options is not None and body.stream_options.include_usage
            return AnswerStream(handle, answers.sse(handle, request, answer, usage), media_type="text/event-stream",
                                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        out = await answers.whole(handle, request, answer)
        return JSONResponse(out) if out is not None else Response(status_code=499)  # nobody left to read it

    @app.get("/v1/models")
    async def list_models():
        return shapes.models(model_name, created)

    @app.get("/v1/models/{name:path}")
    async def one_model(name: str):
        if name != model_name:
            raise errors.ApiError(404, f"no model '{name}' here; this server serves '{model_name}'",
                                  param="model", code="model_not_found")
        return shapes.model(model_name, created)

    @app.get("/slots")
    async def slots():
        """llama-server's /slots: each slot (lane), whether it is processing, the tokens it holds."""
        return engine.slots_info()

    @app.get("/health")
    async def health():
        if (failure := getattr(engine, "failure", None)) is not None:  # the engine thread has stopped
            raise errors.ApiError(503, f"the engine stopped: {failure}; the server is exiting", code="engine_failed")
        return {"status": "ok"}

    @app.get("/metrics")
    async def metrics():
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(reg), media_type=CONTENT_TYPE_LATEST)

    return app
