"""An answer as it grows, read into OpenAI's pieces: content, reasoning_content, tool calls.

`Splitter.update(text, final)` reads the whole answer so far (a parser is cheap beside a decode
step) and returns only what is new since the last call: text released once nothing after it can
turn it into something else (a marker's beginning, a call being written), each call once it is
complete. The pieces streamed join to the final reading, except whitespace a final reading trims
around calls.
"""

from __future__ import annotations

from dataclasses import dataclass

from homespec.chatformat.base import Parsed, ToolCall, ToolFormat
from homespec.chatformat.reasoning import CLOSE, OPEN, split_thinking


@dataclass(frozen=True, slots=True)
class Delta:
    content: str = ""
    reasoning: str = ""
    calls: tuple[ToolCall, ...] = ()  # complete calls, each once

    def __bool__(self) -> bool:
        return bool(self.content or self.reasoning or self.calls)


class Splitter:
    def __init__(self, fmt: ToolFormat | None, thinking: str = "deepseek", starts_open: bool = False) -> None:
        self.fmt = fmt
        self.thinking = thinking  # none | deepseek | deepseek-legacy (auto is deepseek)
        self.starts_open = starts_open
        self.sent_content = ""
        self.sent_reasoning = ""
        self.sent_calls: list[ToolCall] = []

    def read(self, text: str, final: bool) -> Parsed:
        """The answer so far, read whole."""
        if self.fmt is not None and self.fmt.reads_reasoning:
            return self.fmt.parse(text, final)
        reasoning, rest = ("", text) if self.thinking == "none" else split_thinking(text, self.starts_open, final)
        parsed = self.fmt.parse(rest, final) if self.fmt is not None else Parsed(rest)
        if self.thinking == "deepseek-legacy" and reasoning:  # the block stays in content too
            closed = CLOSE if (final or rest) else ""
            parsed = Parsed(f"{OPEN}{reasoning}{closed}{parsed.content}", parsed.calls)
        return Parsed(parsed.content, parsed.calls, reasoning or parsed.reasoning)

    def update(self, text: str, final: bool) -> Delta:
        parsed = self.read(text, final)
        content = parsed.content if final or self.fmt is None else parsed.content.rstrip()
        new_content = content[len(self.sent_content):] if content.startswith(self.sent_content) else ""
        new_reasoning = ""
        if parsed.reasoning.startswith(self.sent_reasoning):
            new_reasoning = parsed.reasoning[len(self.sent_reasoning):]
        self.sent_content += new_content
        self.sent_reasoning += new_reasoning
        calls = parsed.calls[len(self.sent_calls):]
        self.sent_calls.extend(calls)
        return Delta(new_content, new_reasoning, tuple(calls))

    def final(self, text: str, whole: bool = True) -> Parsed:
        """The answer read at its end, the calls streamed keeping their ids. `whole` False: the
        answer was cut (max_tokens, the context's end), so what was still being written (a call's
        beginning, a marker's) is left out as a stream leaves it out, not read as text."""
        parsed = self.read(text, whole)
        calls = tuple(self.sent_calls[i] if i < len(self.sent_calls) else c for i, c in enumerate(parsed.calls))
        content = parsed.content if whole or self.fmt is None else parsed.content.rstrip()  # as update sent it
        return Parsed(content, calls, parsed.reasoning)
