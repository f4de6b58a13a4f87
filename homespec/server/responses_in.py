"""A Responses API request read as the chat request it amounts to.

`instructions` is a system message; `input` a string or a list of items (messages with
`input_text` / `output_text` parts, earlier `function_call`s and their `function_call_output`s);
with `previous_response_id`, the stored conversation that response ended goes first (its
instructions are not carried over, as OpenAI's are not). `tools`: function tools are chat tools;
a `namespace` tool's functions are flattened to `NAMESPACE__NAME` (Codex's own spelling of a
namespaced tool, homespec.server.responses_out answers with `namespace` and `name` apart again);
every other kind (`web_search`, `file_search`, `custom`, ...) is left out with one warning in the
log: they are tools a hosted service runs, which no model here can call, and clients send them
unasked (Codex CLI sends `web_search` with every request), so refusing them would refuse the client.
`text.format` is response_format, `max_output_tokens` max_tokens, `reasoning.effort` the template's.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Union

from pydantic import Field, StrictBool, StrictStr, ValidationError

from homespec.server.errors import ApiError
from homespec.server.schemas import ChatRequest, Number, _Body

log = logging.getLogger("homespec.server")
NAMESPACE_JOIN = "__"  # Codex's: a namespaced tool's flat name is NAMESPACE__NAME


class Part(_Body):
    type: StrictStr  # input_text | output_text | text (others: refused below)
    text: Optional[StrictStr] = None


class Item(_Body):
    type: StrictStr = "message"  # message | function_call | function_call_output | reasoning
    role: Optional[Literal["system", "developer", "user", "assistant"]] = None
    content: Union[StrictStr, list[Part], None] = None
    call_id: Optional[StrictStr] = None
    name: Optional[StrictStr] = None
    namespace: Optional[StrictStr] = None  # a call of a namespace tool's function
    arguments: Optional[StrictStr] = None
    output: Union[StrictStr, list[Part], None] = None  # text, or a list of parts (Codex sends both)


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
    store: Optional[StrictBool] = None  # None: true, as OpenAI's default
    metadata: Optional[dict[str, Any]] = Field(default=None)


@dataclass
class Reading:
    """What a Responses request amounts to."""

    chat: ChatRequest
    new: list[dict[str, Any]]  # this request's own messages (instructions excluded), for the store
    names: dict[str, tuple[str, str]] = field(default_factory=dict)  # flat name -> (namespace, name)


def chat_request(body: ResponsesRequest, earlier: tuple[dict[str, Any], ...] = ()) -> Reading:
    """The chat request a Responses request amounts to (its checks are chat's, its fields renamed);
    `earlier`: the stored conversation of previous_response_id."""
    tools, names = chat_tools(body.tools or [])
    new = messages(body, names)
    system = [{"role": "system", "content": body.instructions}] if body.instructions else []
    fields: dict[str, Any] = {"messages": system + list(earlier) + new, "stream": body.stream,
                              "parallel_tool_calls": body.parallel_tool_calls}
    for ours, theirs in (("max_tokens", "max_output_tokens"), ("temperature", "temperature"), ("top_p", "top_p"),
                         ("tool_choice", "tool_choice")):
        if getattr(body, theirs) is not None:
            fields[ours] = getattr(body, theirs)
    if tools:
        fields["tools"] = tools
    fields["tool_choice"] = _choice(fields.get("tool_choice"), names)
    fmt = (body.text or {}).get("format")
    if isinstance(fmt, dict) and fmt.get("type") in ("json_schema", "json_object"):
        fields["response_format"] = {"type": fmt["type"], "json_schema": {"name": fmt.get("name", "response"),
                                                                          "schema": fmt.get("schema")}} \
            if fmt["type"] == "json_schema" else {"type": "json_object"}
    if isinstance(body.reasoning, dict) and isinstance(body.reasoning.get("effort"), str):
        fields["reasoning_effort"] = body.reasoning["effort"]
    try:
        return Reading(ChatRequest.model_validate(fields), new, names)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "input"
        raise ApiError(400, f"{where}: {first['msg']}", param=where, code="invalid_value") from None


def chat_tools(tools: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, tuple[str, str]]]:
    """Chat's function tools (a namespace's flattened) and the flat names' (namespace, name)."""
    out: list[dict[str, Any]] = []
    names: dict[str, tuple[str, str]] = {}
    left_out: list[str] = []
    for t in tools:
        if t.get("type") == "function":
            out.append(_function(t, t.get("name")))
        elif t.get("type") == "namespace" and isinstance(t.get("name"), str):
            for inner in t.get("tools") or []:
                if isinstance(inner, dict) and inner.get("type", "function") == "function":
                    flat = flat_name(t["name"], str(inner.get("name", "")))
                    names[flat] = (t["name"], str(inner.get("name", "")))
                    out.append(_function(inner, flat))
                else:
                    left_out.append(f"{t['name']}.{inner.get('type') if isinstance(inner, dict) else inner}")
        else:
            left_out.append(str(t.get("type")))
    if left_out:
        _warn_once(f"tools left out: {', '.join(sorted(set(left_out)))} (only function tools can be called here; "
                   "hosted tools such as web_search run on the provider's side)")
    return out, names


def flat_name(namespace: str, name: str) -> str:
    return f"{namespace.rstrip('_')}{NAMESPACE_JOIN}{name.lstrip('_')}"


def _function(tool: dict[str, Any], name: Any) -> dict[str, Any]:
    spec = {k: tool[k] for k in ("description", "parameters") if k in tool}
    return {"type": "function", "function": {"name": name, **spec}}


def _choice(choice: Any, names: dict[str, tuple[str, str]]) -> Any:
    """Chat's tool_choice for the Responses API's (`{"type": "function", "name"}`, a namespace's
    function by its own name and `namespace`); a hosted tool's is refused."""
    if not isinstance(choice, dict):
        return choice
    if choice.get("type") != "function" or not isinstance(choice.get("name"), str):
        raise ApiError(400, f"tool_choice: {choice.get('type')!r} tools are not served here (function tools only)",
                       param="tool_choice")
    name = flat_name(choice["namespace"], choice["name"]) if isinstance(choice.get("namespace"), str) \
        else choice["name"]
    return {"type": "function", "function": {"name": name}}


def messages(body: ResponsesRequest, names: dict[str, tuple[str, str]]) -> list[dict[str, Any]]:
    """The input as chat messages (instructions excluded)."""
    if isinstance(body.input, str):
        return [{"role": "user", "content": body.input}]
    out: list[dict[str, Any]] = []
    for i, item in enumerate(body.input):
        if item.type == "message":
            out.append({"role": item.role or "user", "content": _text(item.content, f"input.{i}.content")})
        elif item.type == "function_call":
            name = flat_name(item.namespace, item.name or "") if item.namespace else item.name or ""
            call = {"id": item.call_id or "", "type": "function",
                    "function": {"name": name, "arguments": item.arguments or "{}"}}
            if out and out[-1]["role"] == "assistant" and out[-1].get("tool_calls") is not None:
                out[-1]["tool_calls"].append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif item.type == "function_call_output":
            out.append({"role": "tool", "content": _text(item.output, f"input.{i}.output"),
                        "tool_call_id": item.call_id})
        elif item.type != "reasoning":  # earlier thinking is not read back, as chat templates drop it
            raise ApiError(400, f"input.{i}.type: '{item.type}' items are not supported here (message, "
                           "function_call, function_call_output)", param=f"input.{i}.type")
    return out


def _text(content: Union[str, list[Part], None], where: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    for j, part in enumerate(content):
        if part.type not in ("input_text", "output_text", "text") or part.text is None:
            raise ApiError(400, f"{where}.{j}: '{part.type}' parts are not supported here (text only)", param=where)
    return "".join(p.text or "" for p in content)


def answered(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A response's output items as the chat messages a later request reads them as (what
    previous_response_id carries on; a call cut while it streamed is not one)."""
    text = "".join(p.get("text", "") for item in output if item["type"] == "message" for p in item["content"])
    calls = [{"id": item["call_id"], "type": "function",
              "function": {"name": flat_name(item["namespace"], item["name"]) if item.get("namespace")
                           else item["name"], "arguments": item["arguments"]}}
             for item in output if item["type"] == "function_call" and item.get("status") != "incomplete"]
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = calls
    return [message]


_SAID: set[str] = set()


def _warn_once(line: str) -> None:
    if line not in _SAID:
        _SAID.add(line)
        log.warning(line)
