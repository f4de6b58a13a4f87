"""An Anthropic Messages request read as the chat request it amounts to.

`system` (a string or text blocks) is a system message; each message's content a string or blocks:
`text`, an assistant's `tool_use` (a tool call, `input` as its arguments) and `thinking` (its
reasoning_content), a user's `tool_result` (a tool message answering `tool_use_id`, before the
user's text, as Anthropic orders them). `tools` (`name`, `description`, `input_schema`) are chat's
function tools; Anthropic's own server tools (`web_search_...`, `bash_...`, ..., which have no
`input_schema`) are left out with one warning, as the Responses route leaves hosted tools out.
`tool_choice` auto / any / tool / none is chat's auto / required / a named function / none, and
`disable_parallel_tool_use` is `parallel_tool_calls: false`. `stop_sequences` are stop strings;
`temperature`, `top_p`, `top_k` and `max_tokens` (required, as Anthropic requires it) keep their
meaning. `thinking: {"type": "enabled"}` (or "adaptive") returns the model's thinking as thinking
blocks; otherwise templates that read `enable_thinking` are told false and no thinking is returned.
Images and documents are refused with a 400 naming the block.
"""

from __future__ import annotations

import json
from typing import Any, Literal, Optional, Union

from pydantic import Field, StrictBool, StrictInt, StrictStr, ValidationError

from homespec.server.errors import ApiError
from homespec.server.responses_in import _warn_once
from homespec.server.schemas import MAX_STOPS, ChatRequest, Number, _Body


class Block(_Body):
    type: StrictStr  # text | tool_use | tool_result | thinking | redacted_thinking (others refused)
    text: Optional[StrictStr] = None
    id: Optional[StrictStr] = None  # tool_use
    name: Optional[StrictStr] = None
    input: Optional[Any] = None
    tool_use_id: Optional[StrictStr] = None  # tool_result
    content: Union[StrictStr, list["Block"], None] = None
    is_error: Optional[StrictBool] = None
    thinking: Optional[StrictStr] = None  # thinking


class AnthropicMessage(_Body):
    role: Literal["user", "assistant"]
    content: Union[StrictStr, list[Block]]


class AnthropicTool(_Body):
    type: Optional[StrictStr] = None  # "custom" or absent for a client tool; server tools name theirs
    name: StrictStr
    description: Optional[StrictStr] = None
    input_schema: Optional[dict[str, Any]] = None


class AnthropicToolChoice(_Body):
    type: Literal["auto", "any", "tool", "none"]
    name: Optional[StrictStr] = None
    disable_parallel_tool_use: StrictBool = False


class Thinking(_Body):
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: Optional[StrictInt] = None


class MessagesRequest(_Body):
    model: Optional[StrictStr] = None
    messages: list[AnthropicMessage] = Field(min_length=1)
    system: Union[StrictStr, list[Block], None] = None
    max_tokens: Optional[Any] = None  # required here; checked as chat's (homespec.limits.MAX_TOKENS)
    stop_sequences: Optional[list[StrictStr]] = Field(default=None, max_length=MAX_STOPS)
    temperature: Optional[Number] = None
    top_p: Optional[Number] = None
    top_k: Optional[StrictInt] = None
    stream: StrictBool = False
    metadata: Optional[dict[str, Any]] = None
    tools: Optional[list[AnthropicTool]] = None
    tool_choice: Optional[AnthropicToolChoice] = None
    thinking: Optional[Thinking] = None

    @property
    def thinks(self) -> bool:
        return self.thinking is not None and self.thinking.type != "disabled"


def chat_request(body: MessagesRequest, counting: bool = False) -> ChatRequest:
    """The chat request `body` amounts to (`counting`: for count_tokens, where max_tokens is not needed)."""
    if body.max_tokens is None and not counting:
        raise ApiError(400, "max_tokens: Field required (the Messages API asks every request for its limit)",
                       param="max_tokens")
    fields: dict[str, Any] = {"messages": _system(body.system) + [m for i, msg in enumerate(body.messages)
                                                                   for m in _messages(msg, i)],
                              "stream": body.stream}
    for ours, theirs in (("max_tokens", "max_tokens"), ("temperature", "temperature"), ("top_p", "top_p"),
                         ("top_k", "top_k"), ("stop", "stop_sequences")):
        if getattr(body, theirs) is not None and not (counting and ours == "max_tokens"):
            fields[ours] = getattr(body, theirs)
    tools = _tools(body.tools or [])
    if tools:
        fields["tools"] = tools
    if body.tool_choice is not None:
        fields.update(_choice(body.tool_choice))
    if not body.thinks:
        fields["chat_template_kwargs"] = {"enable_thinking": False}
    try:
        return ChatRequest.model_validate(fields)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "messages"
        where = {"stop": "stop_sequences"}.get(where, where)
        raise ApiError(400, f"{where}: {first['msg']}", param=where, code="invalid_value") from None


def _system(system: Union[str, list[Block], None]) -> list[dict[str, Any]]:
    if not system:
        return []
    return [{"role": "system", "content": system if isinstance(system, str) else _text(system, "system")}]


def _messages(msg: AnthropicMessage, i: int) -> list[dict[str, Any]]:
    """One Anthropic message as chat messages: a user's tool results as tool messages, then its text;
    an assistant's text, thinking and calls as one message."""
    if isinstance(msg.content, str):
        return [{"role": msg.role, "content": msg.content}]
    where = f"messages.{i}.content"
    if msg.role == "assistant":
        text = "".join(b.text or "" for b in msg.content if b.type == "text")
        calls = [{"id": b.id or "", "type": "function",
                  "function": {"name": b.name or "", "arguments": json.dumps(b.input if b.input is not None else {},
                                                                            ensure_ascii=False)}}
                 for b in msg.content if b.type == "tool_use"]
        thought = "".join(b.thinking or "" for b in msg.content if b.type == "thinking")
        _refuse_others(msg.content, where, ("text", "tool_use", "thinking", "redacted_thinking"))
        out: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            out["tool_calls"] = calls
        if thought:
            out["reasoning_content"] = thought
        return [out]
    _refuse_others(msg.content, where, ("text", "tool_result"))
    out_: list[dict[str, Any]] = []
    for j, b in enumerate(msg.content):
        if b.type == "tool_result":
            answer = b.content if isinstance(b.content, str) or b.content is None \
                else _text(b.content, f"{where}.{j}.content")
            out_.append({"role": "tool", "tool_call_id": b.tool_use_id or "",
                         "content": f"Error: {answer or ''}" if b.is_error else answer or ""})
    text = "".join(b.text or "" for b in msg.content if b.type == "text")
    if text or not out_:
        out_.append({"role": "user", "content": text})
    return out_


def _text(blocks: list[Block], where: str) -> str:
    _refuse_others(blocks, where, ("text",))
    return "\n".join(b.text or "" for b in blocks)


def _refuse_others(blocks: list[Block], where: str, allowed: tuple[str, ...]) -> None:
    for j, b in enumerate(blocks):
        if b.type not in allowed:
            raise ApiError(400, f"{where}.{j}: '{b.type}' blocks are not supported here ({', '.join(allowed)})",
                           param=f"{where}.{j}.type")


def _tools(tools: list[AnthropicTool]) -> list[dict[str, Any]]:
    out, left_out = [], []
    for t in tools:
        if t.input_schema is None and t.type not in (None, "custom"):
            left_out.append(t.type or t.name)
            continue
        fn: dict[str, Any] = {"name": t.name, "parameters": t.input_schema or {"type": "object"}}
        if t.description:
            fn["description"] = t.description
        out.append({"type": "function", "function": fn})
    if left_out:
        _warn_once(f"tools left out: {', '.join(sorted(set(left_out)))} (only client tools with an input_schema "
                   "can be called here; server tools run on the provider's side)")
    return out


def _choice(choice: AnthropicToolChoice) -> dict[str, Any]:
    fields: dict[str, Any] = {"parallel_tool_calls": not choice.disable_parallel_tool_use}
    if choice.type == "tool":
        if not choice.name:
            raise ApiError(400, "tool_choice.name: a tool choice of type 'tool' names the tool", param="tool_choice")
        fields["tool_choice"] = {"type": "function", "function": {"name": choice.name}}
    else:
        fields["tool_choice"] = {"auto": "auto", "any": "required", "none": "none"}[choice.type]
    return fields

