"""Chat templates: Jinja run in a sandbox, with the variables Hugging Face templates expect
(messages, add_generation_prompt, bos_token, eos_token, raise_exception, strftime_now; tools and
a request's template arguments such as enable_thinking when given) and transformers' `tojson`
(plain JSON, not Jinja's HTML-escaped one). Both tokenizers (homespec.backends.tokenizer,
homespec.backends.llamacpp.tokenizer) read a model's template into a ChatTemplate.
"""

from __future__ import annotations

import datetime
import json
from typing import Any, Sequence

from homespec.errors import FormatError, HomespecError, UsageError


def _template_env() -> Any:
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise HomespecError(f"chat template: {message}", hint="check the roles and order of the messages")

    def strftime_now(fmt: str) -> str:
        return datetime.datetime.now().strftime(fmt)

    # trim_blocks/lstrip_blocks: how transformers renders templates, which the authors wrote for
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.filters["tojson"] = _tojson
    return env


def _tojson(value: Any, indent: int | None = None, separators: Any = None, sort_keys: bool = False,
            ensure_ascii: bool = False) -> str:
    """transformers' tojson: the JSON a template's author saw (Jinja's escapes <, > and & for HTML)."""
    return json.dumps(value, indent=indent, separators=separators, sort_keys=sort_keys, ensure_ascii=ensure_ascii)


class ChatTemplate:
    def __init__(self, source: str | None, bos_token: str, eos_token: str, origin: str):
        self.source = source
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.origin = origin
        self._compiled = None

    def render(self, messages: Sequence[dict[str, Any]], add_generation_prompt: bool, **extra: Any) -> str:
        """The prompt; `extra`: more variables (tools, enable_thinking, reasoning_effort, ...)."""
        if not self.source:
            raise UsageError(
                f"{self.origin} has no chat template",
                hint="pass --no-chat to read the prompt as plain text (`homespec generate --no-chat`), "
                     "or use a model with a chat template",
            )
        if self._compiled is None:
            from jinja2 import TemplateError

            try:
                self._compiled = _template_env().from_string(self.source)
            except TemplateError as exc:
                raise FormatError(f"{self.origin}: chat template does not parse ({exc})", hint="the template is broken") from exc
        return self._compiled.render(
            **extra,
            messages=list(messages),
            add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token,
            eos_token=self.eos_token,
        )

    def replaced(self, source: str, origin: str) -> "ChatTemplate":
        """Another template with this one's BOS and EOS (`serve --chat-template-file`)."""
        return ChatTemplate(source, self.bos_token, self.eos_token, origin)


class Templated:
    """A tokenizer's chat template: what `chat_template` reads and `serve --chat-template-file`
    replaces, and `chat_prompt`, the messages rendered through it. The tokenizer sets `_template`."""

    _template: ChatTemplate

    @property
    def chat_template(self) -> ChatTemplate:
        return self._template

    @chat_template.setter
    def chat_template(self, template: ChatTemplate) -> None:
        self._template = template

    def chat_prompt(self, messages: Sequence[dict[str, Any]], add_generation_prompt: bool = True, **extra: Any) -> str:
        return self._template.render(messages, add_generation_prompt, **extra)
