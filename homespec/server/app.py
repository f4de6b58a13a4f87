"""create_app: the OpenAI-compatible routes over one engine.

    POST /v1/chat/completions   messages (and tools) through the model's chat template; stream: SSE
    POST /v1/completions        a plain-text prompt (or token ids)
    POST /v1/responses          the Responses API (homespec/server/responses_api.py); GET / DELETE
                                /v1/responses/{id}: the stored ones (homespec/server/store.py)
    POST /v1/messages           Anthropic's Messages API (homespec/server/messages_api.py), and
                                /v1/messages/count_tokens
    GET  /v1/models             the one model served, under --alias
    GET  /props, /slots         llama-server's discovery routes; POST /tokenize, /detokenize, /apply-template
    GET  /health                {"status": "ok"} (no key needed)
    GET  /metrics               Prometheus text
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from fastapi import FastAPI
from fastapi.responses import Response
from starlette.middleware.cors import CORSMiddleware

from homespec.server import errors
from homespec.server.answers import AnswerStream, Defaults
from homespec.server.chat import chat_settings
from homespec.server.completions import completion_routes
from homespec.server.discovery import discovery_routes
from homespec.server.guard import Guard
from homespec.server.metrics import registry
from homespec.server.messages_api import messages_routes
from homespec.server.responses_api import responses_routes
from homespec.server.store import ResponseStore

if TYPE_CHECKING:
    from homespec.engine.core import Engine
    from homespec.server.chat import ChatSettings

__all__ = ["AnswerStream", "create_app", "openapi_schema"]

log = logging.getLogger("homespec.server")
MAX_BODY = 8 << 20  # bytes; --max-body-mib
# pages served from this machine may call the API from a browser whatever --cors says (as Ollama
# allows localhost origins by default); another site's page only when --cors names it
LOOPBACK_ORIGINS = r"https?://(localhost|127\.0\.0\.1|\[::1\])(:\d+)?"


def create_app(engine: "Engine", *, model_name: str, api_key: str | None = None, max_body: int = MAX_BODY,
               cors: tuple[str, ...] = (), chat: "ChatSettings | None" = None, defaults: Defaults = Defaults(),
               store: ResponseStore | None = None):
    """The ASGI app: the routes behind the guard (key, body limit, counts), behind CORS (a
    browser's preflight carries no key, so it is answered before the guard asks for one).
    `chat`: what the chat template says (homespec.server.chat.chat_settings; default: read now);
    `defaults`: what the server fills in where a request leaves a field out (--max-tokens, --temperature,
    --top-k, --top-p); `store`: the stored
    Responses API answers (default: a store of the default bounds)."""
    reg, http_count = registry(engine, model_name)
    chat = chat if chat is not None else chat_settings(engine.tokenizer)
    store = store if store is not None else ResponseStore(keyed=bool(api_key))
    app = routes(engine, model_name, reg, chat, defaults, store)
    guarded = Guard(app, api_key=api_key, max_body=max_body, count=http_count.add)
    return EndQuietly(CORSMiddleware(guarded, allow_origins=list(cors), allow_origin_regex=LOOPBACK_ORIGINS,
                                     allow_methods=["GET", "POST"], allow_headers=["*"], max_age=600))


class EndQuietly:
    """The outermost layer: a request whose task the server cancels (a client that never read its
    answer's ending, at the end of a shutdown: homespec.server.run) is logged in one line, not as
    uvicorn's "Exception in ASGI application" traceback; the connection is closed as before."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        try:
            await self.app(scope, receive, send)
        except asyncio.CancelledError:
            if scope.get("type") != "http":
                raise
            log.warning("%s %s: cut at shutdown (its client did not read the answer's end in time)",
                        scope.get("method"), scope.get("path"))


def openapi_schema() -> dict:
    """The OpenAPI schema FastAPI makes of the routes and their pydantic bodies (not served; the
    tests generate requests from it). The routes read no engine until a request comes."""
    from prometheus_client import CollectorRegistry

    return routes(None, "model", CollectorRegistry(), None, Defaults(), ResponseStore()).openapi()  # type: ignore[arg-type]


def routes(engine: "Engine", model_name: str, reg, chat: "ChatSettings | None", defaults: Defaults,
           store: ResponseStore) -> FastAPI:
    """The routes over `engine`, with OpenAI's error shape for every failure (Anthropic's on its routes)."""
    app = FastAPI(title="homespec", docs_url=None, redoc_url=None, openapi_url=None)
    errors.install(app)
    app.include_router(completion_routes(engine, model_name, chat, defaults))
    app.include_router(responses_routes(engine, model_name, chat, defaults, store))
    app.include_router(messages_routes(engine, model_name, chat, defaults))
    app.include_router(discovery_routes(engine, model_name, int(time.time()), chat, defaults))

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
