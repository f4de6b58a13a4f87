"""The request bodies of /v1/chat/completions and /v1/completions, validated as OpenAI does.

Numbers and strings are strict (a "5" is not a 5); fields OpenAI defines that homespec does not
use (user, presence_penalty, logit_bias, ...) are accepted and ignored, as llama-server does.
Tools, tool_choice, response_format, logprobs and the reasoning fields are read here and acted on
in homespec/server/chat.py.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import (AllowInfNan, BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr,
                      ValidationInfo, field_validator)
from pydantic_core import PydanticCustomError

from homespec import limits

# numbers as JSON writes them; Python's JSON reader takes NaN and Infinity, which no range holds
Number = Union[Annotated[StrictFloat, AllowInfNan(False)], StrictInt]
MAX_STOPS = 16  # OpenAI allows 4; llama-server any number
MAX_TOKEN_ID = (1 << 31) - 1  # llama.cpp's llama_token is an int32


def _bounded(r: limits.Range, **kw: Any) -> Any:
    """pydantic's bounds for a field from its range (homespec.limits): the CLI's, for one check."""
    low = {"gt": r.lo} if r.lo_open else {"ge": r.lo}
    return Field(**low, le=r.hi, **kw)


def _text(value: Any) -> Any:
    """Strings (or lists of them) that UTF-8 can encode: JSON's "\ud800" escape makes a lone
    surrogate, which is no character, and which no tokenizer can read."""
    for s in [value] if isinstance(value, str) else value if isinstance(value, list) else ():
        text = s if isinstance(s, str) else getattr(s, "text", None)
        if isinstance(text, str):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as e:
                raise PydanticCustomError("invalid_text", "contains a lone surrogate ({code}), which is not a "
                                          "character", {"code": f"\\u{ord(text[e.start]):04x}"}) from None
    return value


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class TextPart(_Body):
    type: Literal["text"]
    text: StrictStr

    _utf8 = field_validator("text")(lambda cls, v: _text(v))


class FunctionCall(_Body):
    name: StrictStr
    arguments: StrictStr = "{}"  # JSON text, as OpenAI sends it


class MessageToolCall(_Body):
    id: StrictStr = ""
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(_Body):
    # "function": the legacy answer to a `function_call` (read as a tool's answer)
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    # an assistant's may be left out or null (one that called tools: litellm and OpenAI's own types
    # leave it out then); every other role's is required, as OpenAI's is
    content: Union[StrictStr, list[TextPart], None] = Field(default=None, validate_default=True)
    tool_calls: Optional[list[MessageToolCall]] = None  # an assistant's calls, rendered back
    function_call: Optional[FunctionCall] = None  # the legacy single call: read as one tool call
    tool_call_id: Optional[StrictStr] = None  # a tool's answer: which call it answers
    name: Optional[StrictStr] = None
    reasoning_content: Optional[StrictStr] = None  # an assistant's thinking, for templates that keep it

    @field_validator("content")
    @classmethod
    def _content(cls, v: Any, info: ValidationInfo) -> Any:
        if v is None and info.data.get("role") != "assistant":
            raise PydanticCustomError("missing_content", "content is required: null is only allowed in an "
                                      "assistant's message (which may also leave it out); send a string or a "
                                      "list of text parts")
        return _text(v)

    def calls(self) -> list[MessageToolCall]:
        """The assistant's calls: `tool_calls`, or the legacy `function_call` as one."""
        if self.tool_calls:
            return self.tool_calls
        return [MessageToolCall(function=self.function_call)] if self.function_call is not None else []

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(p.text for p in self.content)
        return self.content or ""


FUNCTION_NAME = r"^[A-Za-z0-9_.:\-]{1,64}$"  # OpenAI's rule, with the dots and colons some MCP tools use
MAX_TOOLS = 512
REASONING_FORMATS = Literal["none", "deepseek", "deepseek-legacy", "auto"]  # llama-server's


class FunctionSpec(_Body):
    name: Annotated[StrictStr, Field(pattern=FUNCTION_NAME)]
    description: Optional[StrictStr] = None
    parameters: Optional[dict[str, Any]] = None  # a JSON schema
    strict: Optional[StrictBool] = None


class Tool(_Body):
    type: Literal["function"] = "function"
    function: FunctionSpec


class ChosenFunction(_Body):
    name: StrictStr


class NamedToolChoice(_Body):
    type: Literal["function"] = "function"
    function: ChosenFunction


class JsonSchemaSpec(_Body):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    name: StrictStr = "response"
    description: Optional[StrictStr] = None
    schema_: Optional[dict[str, Any]] = Field(default=None, alias="schema")
    strict: Optional[StrictBool] = None


class ResponseFormat(_Body):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    type: Literal["text", "json_object", "json_schema"]
    json_schema: Optional[JsonSchemaSpec] = None
    schema_: Optional[dict[str, Any]] = Field(default=None, alias="schema")  # llama-server's json_object + schema


class StreamOptions(_Body):
    include_usage: StrictBool = False


class Sampling(_Body):
    """What both endpoints share: length, sampling, stop strings, streaming."""

    model: Optional[StrictStr] = None  # any name: this server serves one model
    # the ranges are the CLI's (homespec.limits), so a request is refused where a flag would be
    max_tokens: Optional[Annotated[StrictInt, _bounded(limits.MAX_TOKENS)]] = None
    temperature: Annotated[Number, _bounded(limits.TEMPERATURE)] = 1.0  # OpenAI's default; 0 = greedy
    top_p: Annotated[Number, _bounded(limits.TOP_P)] = 1.0
    top_k: Annotated[StrictInt, _bounded(limits.TOP_K)] = 0  # llama-server's extension; 0 = off
    seed: Optional[Annotated[StrictInt, _bounded(limits.SEED)]] = None  # None: a fresh seed per request
    stop: Union[StrictStr, list[StrictStr], None] = None  # at most MAX_STOPS strings (_stops)
    n: Annotated[StrictInt, Field(ge=1, le=MAX_TOKEN_ID)] = 1
    stream: StrictBool = False
    stream_options: Optional[StreamOptions] = None
    cache_prompt: StrictBool = True  # llama-server's field: False starts from an empty cache
    # llama-server's constraints: a JSON schema, or a GBNF grammar (read through llguidance)
    json_schema: Optional[dict[str, Any]] = None
    grammar: Optional[StrictStr] = None

    @field_validator("stop")
    @classmethod
    def _stops(cls, v: Any) -> Any:
        if isinstance(v, list) and len(v) > MAX_STOPS:  # named for its limit, not for the union it is in
            raise PydanticCustomError("too_many_stops", "at most {limit} stop strings, got {n}",
                                      {"limit": MAX_STOPS, "n": len(v)})
        return _text(v)

    def stops(self) -> tuple[str, ...]:
        stops = [self.stop] if isinstance(self.stop, str) else (self.stop or [])
        return tuple(s for s in stops if s)


class ChatRequest(Sampling):
    messages: Annotated[list[Message], Field(min_length=1)]
    max_completion_tokens: Optional[Annotated[StrictInt, _bounded(limits.MAX_TOKENS)]] = None  # OpenAI's newer name
    tools: Optional[Annotated[list[Tool], Field(max_length=MAX_TOOLS)]] = None
    tool_choice: Union[Literal["none", "auto", "required"], NamedToolChoice, None] = None
    parallel_tool_calls: StrictBool = True
    response_format: Optional[ResponseFormat] = None
    logprobs: StrictBool = False
    top_logprobs: Optional[Annotated[StrictInt, Field(ge=0, le=20)]] = None
    reasoning_format: Optional[REASONING_FORMATS] = None  # llama-server's; default: --reasoning-format
    reasoning_effort: Optional[StrictStr] = None  # passed to templates that take it (gpt-oss)
    chat_template_kwargs: Optional[dict[str, Any]] = None  # e.g. {"enable_thinking": false}

    def wanted_tokens(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


class CompletionRequest(Sampling):
    # one prompt: a string, a list of one string, or token ids
    prompt: Union[StrictStr, Annotated[list[StrictStr], Field(min_length=1, max_length=1)],
                  Annotated[list[Annotated[StrictInt, Field(ge=0, le=MAX_TOKEN_ID)]], Field(min_length=1)]]
    # None: the server's --max-tokens, else OpenAI's default for completions, 16 (homespec/server/completions.py)
    max_tokens: Optional[Annotated[StrictInt, _bounded(limits.MAX_TOKENS)]] = None
    logprobs: Optional[Annotated[StrictInt, Field(ge=0, le=20)]] = None  # the legacy API's: alternatives per token
    echo: StrictBool = False  # the prompt's text before the answer's

    _utf8 = field_validator("prompt")(lambda cls, v: _text(v))

    def wanted_tokens(self) -> int | None:
        return self.max_tokens
