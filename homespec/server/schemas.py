"""The request bodies of /v1/chat/completions and /v1/completions, validated as OpenAI does.

Numbers and strings are strict (a "5" is not a 5); fields OpenAI defines that homespec does not
use (user, presence_penalty, logit_bias, ...) are accepted and ignored, as llama-server does.
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr

Number = Union[StrictFloat, StrictInt]
MAX_STOPS = 16  # OpenAI allows 4; llama-server any number


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class TextPart(_Body):
    type: Literal["text"]
    text: StrictStr


class Message(_Body):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Union[StrictStr, list[TextPart], None] = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(p.text for p in self.content)
        return self.content or ""


class StreamOptions(_Body):
    include_usage: StrictBool = False


class Sampling(_Body):
    """What both endpoints share: length, sampling, stop strings, streaming."""

    model: Optional[StrictStr] = None  # any name: this server serves one model
    max_tokens: Optional[Annotated[StrictInt, Field(ge=1)]] = None
    temperature: Annotated[Number, Field(ge=0, le=2)] = 1.0  # OpenAI's default; 0 = greedy
    top_p: Annotated[Number, Field(gt=0, le=1)] = 1.0
    top_k: Annotated[StrictInt, Field(ge=0)] = 0  # llama-server's extension; 0 = off
    seed: Optional[StrictInt] = None  # None: a fresh seed per request
    stop: Union[StrictStr, Annotated[list[StrictStr], Field(max_length=MAX_STOPS)], None] = None
    n: Annotated[StrictInt, Field(ge=1)] = 1
    stream: StrictBool = False
    stream_options: Optional[StreamOptions] = None
    cache_prompt: StrictBool = True  # llama-server's field: False starts from an empty cache

    def stops(self) -> tuple[str, ...]:
        stops = [self.stop] if isinstance(self.stop, str) else (self.stop or [])
        return tuple(s for s in stops if s)


class ChatRequest(Sampling):
    messages: Annotated[list[Message], Field(min_length=1)]
    max_completion_tokens: Optional[Annotated[StrictInt, Field(ge=1)]] = None  # OpenAI's newer name

    def wanted_tokens(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


class CompletionRequest(Sampling):
    # one prompt: a string, a list of one string, or token ids
    prompt: Union[StrictStr, Annotated[list[StrictStr], Field(min_length=1, max_length=1)],
                  Annotated[list[StrictInt], Field(min_length=1)]]
    max_tokens: Optional[Annotated[StrictInt, Field(ge=1)]] = 16  # OpenAI's default for completions

    def wanted_tokens(self) -> int | None:
        return self.max_tokens
