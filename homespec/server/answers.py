"""From a checked request body to an answer: the prompt's ids, the EngineRequest, and the
handle's responses rendered as one JSON body or as SSE chunks ending in `data: [DONE]`.

A client that goes away (a closed stream, a dropped connection) cancels its handle: the engine
frees its sequence at its next step.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, AsyncIterator

from starlette.requests import Request
from starlette.responses import StreamingResponse

from homespec.engine.api import EngineClosed, EngineFailed, EngineRequest, QueueFull
from homespec.errors import HomespecError
from homespec.server.errors import ApiError
from homespec.server.schemas import CompletionRequest, Sampling
from homespec.engine.responses import Finish, TextDelta
from homespec.speculative.sampling import Sampler

if TYPE_CHECKING:
    from homespec.engine.api import Handle
    from homespec.engine.core import Engine
    from homespec.engine.responses import Response
    from homespec.grammar import Grammar
    from homespec.server.outputs import ChatOutput, TextOutput

    Output = ChatOutput | TextOutput

log = logging.getLogger("homespec.server")
POLL_S = 0.25  # how often a waiting answer looks whether its client is still there
# ... and how often one whose tokens keep coming does: a short answer can otherwise be decoded
# to its end after its client left, never waiting POLL_S for a token
FLOWING_CHECK_S = 0.05


@dataclass(frozen=True, slots=True)
class Defaults:
    """What the server fills in where a request leaves a field out (serve's --max-tokens, --temperature,
    --top-k, --top-p: llama-server's -n, --temp, --top-k, --top-p); None keeps the API's own default
    (no limit but the context's end; OpenAI's temperature 1, top_p 1; top-k off). A request's own
    value always wins. Agents that send no sampling fields (Codex CLI sends none) get these."""

    max_tokens: int | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None

    def sampling(self, body: Sampling) -> tuple[float, int, float]:
        """(temperature, top_k, top_p) for `body`: its own where it set them, else these, else its defaults."""
        given = body.model_fields_set

        def pick(name: str, mine: float | int | None) -> Any:
            return getattr(body, name) if name in given or mine is None else mine

        return float(pick("temperature", self.temperature)), int(pick("top_k", self.top_k)), float(pick("top_p", self.top_p))


def text_ids(engine: "Engine", body: CompletionRequest) -> list[int]:
    prompt = body.prompt[0] if isinstance(body.prompt, list) and isinstance(body.prompt[0], str) else body.prompt
    if isinstance(prompt, str):
        return engine.tokenizer.encode(prompt, add_bos=True)
    n_vocab = getattr(engine, "n_vocab", None)
    bad = [t for t in prompt if t < 0 or (n_vocab is not None and t >= n_vocab)]
    if bad:
        raise ApiError(400, f"prompt: token id {bad[0]} is not in the model's vocabulary", param="prompt")
    return list(prompt)


def engine_request(engine: "Engine", body: Sampling, ids: list[int], wanted: int | None, param: str, *,
                   grammar: "Grammar | None" = None, logprobs: int | None = None,
                   default: int | None = None, defaults: Defaults = Defaults()) -> EngineRequest:
    """The checks that need the prompt's length, then the request the engine takes. `param`:
    the field the prompt came from (messages or prompt); `wanted`: the request's own limit;
    `default`: the route's for a request without one (--max-tokens; None: the context's end, and
    either way no further than the context's end); `defaults`: the server's sampling for fields
    the request left out; `grammar`: what the answer must follow; `logprobs`: score each token
    with this many alternatives."""
    if body.n != 1:
        raise ApiError(400, f"n={body.n}: this server answers one choice per request", param="n")
    if not ids:
        raise ApiError(400, f"{param}: the prompt is empty", param=param)
    if len(ids) >= engine.lane_ctx:
        raise ApiError(400, f"the prompt has {len(ids)} tokens; this server's context holds {engine.lane_ctx} "
                       "(prompt and answer): shorten it, or start the server with a larger --ctx", param=param,
                       code="context_length_exceeded")
    if wanted is not None and len(ids) + wanted > engine.lane_ctx:
        raise ApiError(400, f"max_tokens {wanted} and the prompt's {len(ids)} tokens exceed this server's context "
                       f"of {engine.lane_ctx}; ask for at most {engine.lane_ctx - len(ids)}", param="max_tokens",
                       code="context_length_exceeded")
    seed = body.seed if body.seed is not None else secrets.randbits(31)
    temperature, top_k, top_p = defaults.sampling(body)
    sampler = None if temperature == 0 else Sampler(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
    room = engine.lane_ctx - len(ids)
    limit = wanted if wanted is not None else min(default, room) if default is not None else room
    return EngineRequest(prompt_ids=tuple(ids), max_tokens=limit, sampler=sampler,
                         stop=body.stops(), seed=seed, cache_prompt=body.cache_prompt, grammar=grammar,
                         logprobs=logprobs)


def submit(engine: "Engine", request: EngineRequest) -> "Handle":
    try:
        return engine.submit(request)
    except QueueFull as e:
        raise ApiError(503, e.message, code="server_busy",
                       headers={"Retry-After": str(max(1, round(e.retry_after_s)))}) from None
    except EngineFailed as e:
        raise ApiError(503, e.message, code="engine_failed") from None
    except EngineClosed as e:
        raise ApiError(503, e.message, code="shutting_down", headers={"Retry-After": "5"}) from None
    except HomespecError as e:  # a request the engine itself refuses
        raise ApiError(400, e.message) from None


async def follow(handle: "Handle", request: Request) -> AsyncIterator[list["Response"]]:
    """The handle's responses as they come, in batches (all that was handed over since the last
    one); cancels the handle if the stream is left before its end.

    The engine's thread wakes this coroutine through the event loop (Handle.on_ready), so no
    thread sits blocked per stream and a token costs one loop wake-up, not a thread-pool round
    trip: on a CPU the engine thread shares the interpreter with the HTTP layer, and every
    hand-over the HTTP layer makes dearer delays the next batched step for every stream."""
    loop = asyncio.get_running_loop()
    ready = asyncio.Event()
    handle.on_ready(lambda: loop.call_soon_threadsafe(ready.set))
    ended = False
    checked = float("-inf")
    try:
        while True:
            ready.clear()
            items, done = handle.take()
            if items:
                if time.monotonic() - checked >= FLOWING_CHECK_S:
                    checked = time.monotonic()
                    if await request.is_disconnected():
                        return
                yield items
            if done:
                ended = True
                return
            if not items:
                try:
                    await asyncio.wait_for(ready.wait(), POLL_S)
                except TimeoutError:
                    if await request.is_disconnected():
                        return
    finally:
        handle.on_ready(None)
        if not ended:
            handle.cancel()
            log.info("%s %s: request %d cancelled: the client left", request.method, request.url.path, handle.id)


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


def _failure(handle: "Handle", fin: Finish) -> ApiError | None:
    """An answer that did not end well: the engine failed it (`handle.error`, or the reason
    "error"), or it was cancelled while the client still waited (the server shutting down)."""
    error = getattr(handle, "error", None)
    if error is not None or fin.finish == "error":
        why = f": {error}" if error is not None else ""
        return ApiError(500, f"the engine failed on this request{why}; the server's log has the details")
    if fin.finish == "cancelled":
        return ApiError(503, "the server is shutting down", code="shutting_down")
    return None


async def whole(handle: "Handle", request: Request, out: "Output") -> dict[str, Any] | None:
    """The answer as one body (None when the client left before it was ready)."""
    fin = await ended(handle, request, out)
    return out.body(fin) if fin is not None else None


async def ended(handle: "Handle", request: Request, out: "Output") -> Finish | None:
    """Follow the answer to its end, its text into `out` -> its Finish (None: the client left)."""
    fin = None
    async for batch in follow(handle, request):
        for r in batch:
            if isinstance(r, TextDelta):
                out.take(r)
            elif isinstance(r, Finish):
                fin = r
    if fin is None:
        return None
    if (err := _failure(handle, fin)) is not None:
        raise err
    _log_answer(request, fin)
    return fin


async def sse(handle: "Handle", request: Request, out: "Output", include_usage: bool) -> AsyncIterator[str]:
    """The answer as server-sent events: chunks as its pieces become final, the finish, `[DONE]`.
    The events of one batch of responses go out in one write. The first chunk (a chat's role, an
    echoed prompt) goes out with the first batch, once the engine has read the prompt: sent while
    the request still waited for a slot, it would make a client time its first token from the queue."""
    first = True
    async for batch in follow(handle, request):
        events = [_event(c) for c in out.first()] if first else []
        first = False
        for r in batch:
            if isinstance(r, TextDelta):
                events.extend(_event(c) for c in out.stream(r))
            elif isinstance(r, Finish):
                events.extend(_finish_events(handle, request, out, r, include_usage))
        if events:
            yield "".join(events)
    yield "data: [DONE]\n\n"


def _finish_events(handle: "Handle", request: Request, out: "Output", fin: Finish, include_usage: bool) -> list[str]:
    if (err := _failure(handle, fin)) is not None:
        log.warning("%s %s -> %d (in the stream): %s", request.method, request.url.path, err.status, err.message)
        return [_event({"error": {"message": err.message, "type": "server_error", "param": None, "code": err.code}})]
    _log_answer(request, fin)
    return [_event(c) for c in out.end(fin, include_usage)]


def _event(body: dict[str, Any]) -> str:
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"


def _log_answer(request: Request, fin: Finish) -> None:
    log.info("%s %s: %d prompt (%d reused) + %d answer tokens, %.2f s (prompt %.2f s), %.2f tokens per target "
             "pass, finish %s", request.method, request.url.path, len(fin.prompt_token_ids), fin.cached_tokens,
             len(fin.token_ids), fin.prefill_s + fin.decode_s, fin.prefill_s, fin.mean_accepted, fin.finish)
