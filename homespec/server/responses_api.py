"""POST /v1/responses: OpenAI's Responses API (what Codex CLI speaks) over the chat path.

A request is read as the chat request it amounts to: `instructions` a system message, `input` a
string or a list of items (messages with `input_text` / `output_text` parts, earlier
`function_call`s and their `function_call_output`s), function `tools` as chat tools,
`text.format` as response_format, `max_output_tokens`, `reasoning.effort`. The answer is a
`response` object whose `output` holds a `message` (and a `reasoning` item, and `function_call`s),
streamed as the API's typed events (homespec/server/responses_out.py). Nothing is stored: a
`previous_response_id` is refused (send the whole conversation as `input`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Optional, Union

import anyio
from fastapi import APIRouter, Request
from pydantic import Field, StrictBool, StrictStr, ValidationError

from homespec.server import answers
from homespec.server.answers import AnswerStream
from homespec.server.chat import ChatSettings, prepare
from homespec.server.errors import ApiError
from homespec.server.responses_out import ResponsesOutput
from homespec.server.schemas import ChatRequest, Number, _Body
from homespec.server.shapes import Answer

if TYPE_CHECKING:
    from homespec.engine.core import Engine


class Part(_Body):
    type: StrictStr  # input_text | output_text | text (others: refused below)
    text: Optional[StrictStr] = None


class Item(_Body):
    type: StrictStr = "message"  # message | function_call | function_call_output | reasoning
    role: Optional[Literal["system", "developer", "user", "assistant"]] = None
    content: Union[StrictStr, list[Part], None] = None
    call_id: Optional[StrictStr] = None
    name: Optional[StrictStr] = None
    arguments: Optional[StrictStr] = None
    output: Optional[StrictStr] = None


class ResponsesRequest(_Body):
    model: Optional[StrictStr] = None
    input: Union[StrictStr, list[Item]]
    instructions: Optional[StrictStr] = None
    max_output_tokens: Optional[Any] = None  # checked as chat's max_tokens
    temperature: Optional[Number] = None
    top_p: Optional[Number] = None
    stream: StrictBool = False
    tools: Optional[list[dict[str, Any]]] = None
    tool_choice: Optional[Any] = None
    parallel_tool_calls: StrictBool = True
    text: Optional[dict[str, Any]] = None
    reasoning: Optional[dict[str, Any]] = None
    previous_response_id: Optional[StrictStr] = None
    store: Optional[StrictBool] = None
    metadata: Optional[dict[str, Any]] = Field(default=None)


def responses_routes(engine: "Engine", model_name: str, chat: ChatSettings | None) -> APIRouter:
    router = APIRouter()

    @router.post("/v1/responses")
    async def responses(body: ResponsesRequest, request: Request):
        as_chat = chat_request(body)
        turn = await anyio.to_thread.run_sync(prepare, engine.tokenizer, chat or ChatSettings(None, False), as_chat)
        req = answers.engine_request(engine, as_chat, turn.ids, as_chat.wanted_tokens(), "input", grammar=turn.grammar)
        out = ResponsesOutput(Answer("chat", model_name), engine.tokenizer, turn, body.model_dump(exclude_none=True))
        handle = answers.submit(engine, req)
        if body.stream:
            return AnswerStream(handle, out.events(handle, request), media_type="text/event-stream",
                                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        return await out.whole(handle, request)

    return router


def chat_request(body: ResponsesRequest) -> ChatRequest:
    """The chat request a Responses request amounts to (its checks are chat's, its fields renamed)."""
    if body.previous_response_id is not None:
        raise ApiError(400, "previous_response_id: this server stores no responses; send the whole conversation "
                       "as input (with store: false)", param="previous_response_id")
    fields: dict[str, Any] = {"messages": messages(body), "stream": body.stream,
                              "parallel_tool_calls": body.parallel_tool_calls}
    for ours, theirs in (("max_tokens", "max_output_tokens"), ("temperature", "temperature"), ("top_p", "top_p"),
                         ("tool_choice", "tool_choice")):
        if getattr(body, theirs) is not None:
            fields[ours] = getattr(body, theirs)
    if body.tools:
        fields["tools"] = [{"type": "function", "function": {k: t[k] for k in ("name", "description", "parameters")
                                                             if k in t}}
                           for t in body.tools if t.get("type") == "function"]
    if isinstance(fields.get("tool_choice"), dict) and "name" in fields["tool_choice"]:
        fields["tool_choice"] = {"type": "function", "function": {"name": fields["tool_choice"]["name"]}}
    fmt = (body.text or {}).get("format")
    if isinstance(fmt, dict) and fmt.get("type") in ("json_schema", "json_object"):
        fields["response_format"] = {"type": fmt["type"], "json_schema": {"name": fmt.get("name", "response"),
                                                                          "schema": fmt.get("schema")}} \
            if fmt["type"] == "json_schema" else {"type": "json_object"}
    if isinstance(body.reasoning, dict) and isinstance(body.reasoning.get("effort"), str):
        fields["reasoning_effort"] = body.reasoning["effort"]
    try:
        return ChatRequest.model_validate(fields)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "input"
        raise ApiError(400, f"{where}: {first['msg']}", param=where, code="invalid_value") from None


def messages(body: ResponsesRequest) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": body.instructions}] if body.instructions else []
    if isinstance(body.input, str):
        return out + [{"role": "user", "content": body.input}]
    for i, item in enumerate(body.input):
        if item.type == "message":
            out.append({"role": item.role or "user", "content": _text(item.content, i)})
        elif item.type == "function_call":
            call = {"id": item.call_id or "", "type": "function",
                    "function": {"name": item.name or "", "arguments": item.arguments or "{}"}}
            if out and out[-1]["role"] == "assistant" and out[-1].get("tool_calls") is not None:
                out[-1]["tool_calls"].append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif item.type == "function_call_output":
            out.append({"role": "tool", "content": item.output or "", "tool_call_id": item.call_id})
        elif item.type != "reasoning":  # earlier thinking is not read back, as chat templates drop it
            raise ApiError(400, f"input.{i}.type: '{item.type}' items are not supported here (message, "
                           "function_call, function_call_output)", param=f"input.{i}.type")
    return out


def _text(content: Union[str, list[Part], None], i: int) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    for j, part in enumerate(content):
        if part.type not in ("input_text", "output_text", "text") or part.text is None:
            raise ApiError(400, f"input.{i}.content.{j}: '{part.type}' parts are not supported here (text only)",
                           param=f"input.{i}.content")
    return "".join(p.text or "" for p in content)
