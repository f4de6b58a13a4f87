"""ASGI middleware in front of every route: the API key (constant-time compare; a bearer token or
Anthropic's x-api-key header), the body size limit and its deadline (read whole before any route
parses it), and a count of answers per route and status.

A body must keep coming (BODY_IDLE_S at most between two pieces, as a request's headers must come
within homespec.server.conns.HEADER_TIMEOUT_S) and be whole within BODY_TOTAL_S: a body sent a
byte at a time, chunked without end, or short of its Content-Length is a 408 and the connection
closes, instead of holding a connection and its buffer for as long as the client likes."""

from __future__ import annotations

import asyncio
import hmac
from typing import Awaitable, Callable

from homespec.server.errors import ApiError, error_response

BODY_IDLE_S = 10.0  # the longest pause between two pieces of a body
BODY_TOTAL_S = 60.0  # the whole body (8 MiB in 60 s is ~1.1 Mbit/s: a slow uplink, not a stalled one)

OPEN_PATHS = frozenset({"/health"})  # answered without a key (a load balancer's probe)
ROUTES = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/models", "/health", "/metrics",
                    "/props", "/slots", "/tokenize", "/detokenize", "/apply-template", "/v1/messages",
                    "/v1/messages/count_tokens"})

Scope = dict
Receive = Callable[[], Awaitable[dict]]
Send = Callable[[dict], Awaitable[None]]


def key_matches(header: bytes | None, api_key: str, x_api_key: bytes | None = None) -> bool:
    """`Authorization: Bearer KEY` (OpenAI's clients) or `x-api-key: KEY` (Anthropic's) against
    the key, in constant time."""
    if header and header[:7].lower() == b"bearer ":
        return hmac.compare_digest(header[7:].strip(), api_key.encode())
    return bool(x_api_key) and hmac.compare_digest(x_api_key.strip(), api_key.encode())  # type: ignore[union-attr]


class Guard:
    def __init__(self, app, *, api_key: str | None, max_body: int, count: Callable[[str, int], None],
                 body_idle_s: float = BODY_IDLE_S, body_total_s: float = BODY_TOTAL_S) -> None:
        self.app, self.api_key, self.max_body, self.count = app, api_key, max_body, count
        self.body_idle_s, self.body_total_s = body_idle_s, body_total_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"]
        route = path if path in ROUTES or path.startswith("/v1/models/") else \
            "/v1/responses/{id}" if path.startswith("/v1/responses/") else "other"
        status = [0]

        async def counted(message: dict) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            refusal = self._refusal(scope)
            if refusal is None:
                body, refusal = await self._read_body(scope, receive)
            if refusal is not None:
                return await error_response(f"{scope['method']} {path}", refusal)(scope, receive, counted)
            await self.app(_as_json(scope), _replay(body, receive), counted)
        finally:
            self.count(route, status[0])

    def _refusal(self, scope: Scope) -> ApiError | None:
        headers = dict(scope["headers"])
        if self.api_key and scope["path"] not in OPEN_PATHS and not key_matches(
                headers.get(b"authorization"), self.api_key, headers.get(b"x-api-key")):
            return ApiError(401, "incorrect or missing API key: send `Authorization: Bearer KEY` (or `x-api-key: KEY`)",
                            code="invalid_api_key")
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body:
            return _too_large(self.max_body)
        return None

    async def _read_body(self, scope: Scope, receive: Receive) -> tuple[bytes, ApiError | None]:
        """The whole body, up to the limit (a chunked body has no length to check up front) and
        within its deadlines."""
        chunks, size = [], 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.body_total_s
        while True:
            wait = min(self.body_idle_s, deadline - loop.time())
            try:
                message = await asyncio.wait_for(receive(), timeout=max(0.0, wait))
            except TimeoutError:
                whole = loop.time() >= deadline
                why = f"was not whole within {self.body_total_s:g} s" if whole else \
                    f"stopped coming for {self.body_idle_s:g} s"
                return b"", ApiError(408, f"the request's body {why} ({size:,} bytes came)", code="body_timeout",
                                     headers={"Connection": "close"})
            if message["type"] != "http.request":
                return b"".join(chunks), None  # the client left; the route sees its disconnect
            size += len(message.get("body", b""))
            if size > self.max_body:
                return b"", _too_large(self.max_body)
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                return b"".join(chunks), None


JSON_ROUTES = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/responses", "/tokenize", "/detokenize",
                         "/apply-template", "/v1/messages", "/v1/messages/count_tokens"})


def _as_json(scope: Scope) -> Scope:
    """A completion body is read as JSON whatever its Content-Type says (text/plain from curl -d
    with a wrong -H, none at all), as llama-server reads it: the body itself decides."""
    if scope["method"] != "POST" or scope["path"] not in JSON_ROUTES:
        return scope
    headers = [(k, v) for k, v in scope["headers"] if k != b"content-type"]
    declared = dict(scope["headers"]).get(b"content-type", b"").split(b";")[0].strip().lower()
    if declared == b"application/json" or declared.endswith(b"+json"):
        return scope
    return {**scope, "headers": [*headers, (b"content-type", b"application/json")]}


def _too_large(limit: int) -> ApiError:
    return ApiError(413, f"the body is larger than the server's limit of {limit / 2**20:g} MiB",
                    code="body_too_large")


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that gives the buffered body once, then the client's own messages (its disconnect)."""
    sent = False

    async def again() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again
