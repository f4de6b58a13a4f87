"""A chat request into the prompt the model reads and what its answer is read with.

    settings = chat_settings(engine.tokenizer, template_file, "auto")  # once, at start
    turn = prepare(engine.tokenizer, settings, body)                   # per request

The messages go through the model's chat template (or `--chat-template-file`'s) with the tools,
the request's template arguments (`chat_template_kwargs`, `reasoning_effort`) and the calls and
tool answers of earlier turns, as llama-server's `--jinja` renders them. A template that takes no
tools gets them in the generic format (homespec.chatformat.generic: described in the system
message, the answer held by a grammar to a JSON call or answer). The Turn says how to read the
answer: the tool-call format, whether and how thinking is split out.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from homespec import userfiles
from homespec.backends.template import ChatTemplate
from homespec.chatformat import ToolFormat, tool_format
from homespec.chatformat.generic import Generic
from homespec.chatformat.reasoning import OPEN, opens_thinking
from homespec.errors import UsageError
from homespec.server import constrain
from homespec.server.errors import ApiError

if TYPE_CHECKING:
    from homespec.contracts.backend import Tokenizer
    from homespec.grammar import Grammar
    from homespec.server.schemas import ChatRequest, Message

log = logging.getLogger("homespec.server")
RESERVED = ("messages", "add_generation_prompt", "bos_token", "eos_token")  # template variables a client cannot set


@dataclass(frozen=True)
class ChatSettings:
    """What the server reads once from the chat template."""

    fmt: ToolFormat | None  # the template's tool-call format (None: it takes no tools)
    thinks: bool  # the template writes <think> blocks
    reasoning_format: str = "auto"  # --reasoning-format: none | deepseek | deepseek-legacy | auto


@dataclass(frozen=True)
class Turn:
    prompt: str  # the rendered template
    ids: list[int]
    grammar: "Grammar | None"
    fmt: ToolFormat | None  # read tool calls in the answer with it (None: no tools offered)
    thinking: str  # none | deepseek | deepseek-legacy: how the answer's thinking is split out
    starts_open: bool  # the prompt ends inside a thinking block

    @property
    def plain(self) -> bool:
        """Nothing to read out of the text: it is all content."""
        return self.fmt is None and self.thinking == "none"


def chat_settings(tok: "Tokenizer", template_file: Path | None = None, reasoning_format: str = "auto") -> ChatSettings:
    """Read the template (after replacing it with `template_file`'s); build the vocabulary a grammar
    needs now, so the first constrained request does not wait for it."""
    if template_file is not None:
        tok.chat_template = checked_template(template_file, tok.chat_template)
    source = tok.chat_template.source or ""
    try:
        constrain.vocabulary(tok)
    except Exception as e:  # noqa: BLE001 - structured output then answers 400 per request, the rest works
        log.warning("constrained decoding is unavailable: %s", e)
    return ChatSettings(tool_format(source), OPEN in source, reasoning_format)


def checked_template(path: Path | str, like: "ChatTemplate | None" = None) -> "ChatTemplate":
    """`--chat-template-file`'s template (with `like`'s BOS and EOS), read through
    homespec.userfiles (a FIFO, a device, a huge file refused unread) and refused at start if it
    does not render one user message with the message's own text in it."""
    flag = "--chat-template-file"
    source = userfiles.read_text(str(path), flag, userfiles.TEMPLATE)
    template = like.replaced(source, str(path)) if like is not None else ChatTemplate(source, "", "", str(path))
    probe = "homespec-probe-7f3a"  # a user message no template writes by itself
    try:
        rendered = template.render([{"role": "user", "content": probe}], True)
    except Exception as e:  # noqa: BLE001 - a template that does not parse, or raises on one user message
        raise UsageError(f"{flag} {path}: {' '.join(str(e).split())}",
                         hint="give a Jinja chat template in Hugging Face's form") from None
    if probe not in rendered:
        raise UsageError(f"{flag} {path} does not write the user's message into the prompt",
                         hint="render each message's content, e.g. {% for m in messages %}{{ m['content'] }}"
                              "{% endfor %}") from None
    return template


def prepare(tok: "Tokenizer", settings: ChatSettings, body: "ChatRequest") -> Turn:
    choice = body.tool_choice
    tools = [t.model_dump(exclude_none=True) for t in body.tools or []]
    if choice is not None and choice != "none" and not tools:  # as OpenAI answers it: nothing to choose from
        raise ApiError(400, "tool_choice is only allowed when tools are given: send the tools, or leave "
                       "tool_choice out", param="tool_choice")
    if choice == "none":
        tools = []
    forced = bool(tools) and (choice == "required" or not isinstance(choice, (str, type(None))))
    fmt = settings.fmt
    if tools and fmt is None:  # a template without tools: the generic format (homespec.chatformat.generic)
        if not forced and _asks_grammar(body):
            _say_once("tools left out of a request that asks for its own grammar (response_format, json_schema or "
                      "grammar): this model's template takes no tools, and one grammar holds the whole answer")
            tools = []
        else:
            fmt = Generic(parallel=body.parallel_tool_calls, answers=not forced)
    if not isinstance(choice, (str, type(None))) and tools:
        tools = [t for t in tools if t["function"]["name"] == choice.function.name]
        if not tools:
            raise ApiError(400, f"tool_choice names '{choice.function.name}', which is not among the tools",
                           param="tool_choice")
    generic = isinstance(fmt, Generic) and bool(tools)
    prompt = _render(tok, body, tools, fmt if generic else None)
    ids = tok.encode(prompt, add_bos=False, special=True)
    grammar = constrain.tool_call(tok, fmt, tools, body.parallel_tool_calls) if forced or generic \
        else constrain.requested(tok, body)
    fmt = fmt if tools else None
    starts_open = opens_thinking(prompt)
    thinking = body.reasoning_format or settings.reasoning_format
    thinking = "deepseek" if thinking == "auto" else thinking
    if not (settings.thinks or starts_open or (fmt is not None and fmt.reads_reasoning)):
        thinking = "none"
    return Turn(prompt, ids, grammar, fmt, thinking, starts_open)


def _asks_grammar(body: "ChatRequest") -> bool:
    fmt = body.response_format
    return (fmt is not None and fmt.type != "text") or body.json_schema is not None or body.grammar is not None


_SAID: set[str] = set()


def _say_once(line: str) -> None:
    if line not in _SAID:
        _SAID.add(line)
        log.info(line)


def _render(tok: "Tokenizer", body: "ChatRequest", tools: list[dict[str, Any]], generic: Generic | None = None) -> str:
    """The prompt: the messages (and the tools) through the template; with the generic format, the
    tools described in the system message and the calls written as JSON instead (a template that
    refuses a system message gets them before the first user message)."""
    extra = {k: v for k, v in (body.chat_template_kwargs or {}).items() if k not in RESERVED}
    if body.reasoning_effort is not None:
        extra.setdefault("reasoning_effort", body.reasoning_effort)
    messages = [template_message(m) for m in body.messages]
    if tools and generic is None:
        extra["tools"] = tools
    try:
        if generic is None:
            return tok.chat_prompt(messages, True, **extra)
        try:
            return tok.chat_prompt(generic.history(messages, tools), True, **extra)
        except Exception:  # noqa: BLE001 - some templates (Gemma's) raise on a system message
            return tok.chat_prompt(generic.history(messages, tools, system_role=False), True, **extra)
    except Exception as e:  # noqa: BLE001 - a template that raises on these roles or their order
        raise ApiError(400, f"the model's chat template refused these messages: {' '.join(str(e).split())}",
                       param="messages") from None


def template_message(m: "Message") -> dict[str, Any]:
    """A message as Hugging Face templates read it: developer is system, the legacy function role a
    tool; a call's arguments an object (templates write them with tojson), a legacy `function_call`
    one call; a tool's answer with the call it answers."""
    role = {"developer": "system", "function": "tool"}.get(m.role, m.role)
    out: dict[str, Any] = {"role": role, "content": m.text()}
    if calls := m.calls():
        out["tool_calls"] = [{"id": c.id, "type": "function",
                              "function": {"name": c.function.name, "arguments": _object(c.function.arguments)}}
                             for c in calls]
    for key in ("tool_call_id", "name", "reasoning_content"):
        if getattr(m, key) is not None:
            out[key] = getattr(m, key)
    return out


def _object(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments
