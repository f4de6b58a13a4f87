"""AnswerStream: a streamed answer cancels its handle however the response ends."""

from __future__ import annotations

import asyncio

import pytest

from homespec.engine.api import EngineRequest, Handle
from homespec.server.app import AnswerStream


def _handle() -> Handle:
    return Handle(EngineRequest(prompt_ids=(1, 2, 3), max_tokens=4), 0)


async def _receive() -> dict:
    await asyncio.sleep(3600)  # a client that sends nothing more
    return {"type": "http.disconnect"}


def _run(response: AnswerStream, send) -> None:
    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.4"}, "method": "POST", "path": "/"}
    asyncio.run(response(scope, _receive, send))


def test_a_client_gone_before_the_first_event_cancels_the_answer():
    h = _handle()
    started: list[bool] = []

    async def body():
        started.append(True)
        yield "data: never\n\n"

    async def send(message: dict) -> None:
        raise OSError("connection reset")  # the client left before the headers went out

    with pytest.raises(Exception):  # Starlette reports the disconnect its own way
        _run(AnswerStream(h, body()), send)
    assert h.cancelled and not started  # the generator's own clean-up never ran


def test_a_whole_stream_ends_with_the_handle_cancelled_harmlessly():
    h = _handle()
    sent: list[dict] = []

    async def body():
        yield "data: a\n\n"
        yield "data: [DONE]\n\n"

    async def send(message: dict) -> None:
        sent.append(message)

    _run(AnswerStream(h, body(), media_type="text/event-stream"), send)
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body", "http.response.body",
                                         "http.response.body"]
    assert b"".join(m.get("body", b"") for m in sent) == b"data: a\n\ndata: [DONE]\n\n"
    assert h.cancelled  # after its end: the engine has already let it go
