"""gpt-oss's harmony format: the answer is a series of messages, each on a channel,

    <|channel|>analysis<|message|>The user asks for the weather...<|end|>
    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>

`analysis` is the thinking (reasoning_content), `final` the answer (content), a `commentary`
message addressed `to=functions.NAME` a call. The markers are special tokens, so the answer is
read from text decoded with them spelled out.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from homespec.chatformat import partial
from homespec.chatformat.base import (Parsed, Term, ToolCall, Writing, arguments_text, held_prefix, lark_json,
                                      lark_string, parameters)

MESSAGE, CHANNEL, CONSTRAIN = "<|message|>", "<|channel|>", "<|constrain|>"
ENDS = ("<|end|>", "<|call|>", "<|return|>")
START = "<|start|>"
RECIPIENT = re.compile(r"to=functions\.([^\s<]+)")


class Harmony:
    name = "harmony"
    needs_special = True
    reads_reasoning = True

    def parse(self, text: str, final: bool) -> Parsed:
        if MESSAGE not in text and CHANNEL not in text:  # not harmony after all (or nothing yet)
            return Parsed(text if final else "")
        content, reasoning, calls = [], [], []
        writing = None
        pos = 0
        while (m := text.find(MESSAGE, pos)) >= 0:
            header = text[pos:m]
            end, closed = _body_end(text, m + len(MESSAGE))
            body = text[m + len(MESSAGE):end]
            if not closed and not final:
                body = body[:len(body) - held_prefix(body, [*ENDS, START])]
            channel = header.split(CHANNEL, 1)[1].split()[0] if CHANNEL in header else ""
            recipient = RECIPIENT.search(header)
            if recipient is not None:
                if closed or final:
                    calls.append(ToolCall(recipient.group(1), _arguments(body)))
                elif (held := partial.object_so_far(body, 0)) is not None:  # the last message: still coming
                    writing = Writing(recipient.group(1), held)
            elif channel == "analysis":
                reasoning.append(body)
            else:
                content.append(body)
            pos = end
            for mark in (*ENDS, START, "assistant"):  # past the message's end and the next one's role
                if text.startswith(mark, pos):
                    pos += len(mark)
        return Parsed("".join(content), tuple(calls), "".join(reasoning), writing)

    def call_grammar(self, tools: Sequence[dict[str, Any]], parallel: bool, term: Term) -> str:
        rules = []
        for i, tool in enumerate(tools):
            head = lark_string(f"commentary to=functions.{tool['function']['name']} ")
            rules.append(f"call{i}: {term(CHANNEL)} {head} {term(CONSTRAIN)} \"json\" {term(MESSAGE)} "
                         f"{lark_json(parameters(tool))}")
        return "start: " + " | ".join(f"call{i}" for i in range(len(tools))) + "\n" + "\n".join(rules) + "\n"


def _body_end(text: str, start: int) -> tuple[int, bool]:
    """Where a message's body ends (its end marker or the next message's start) and whether it did."""
    hits = [i for i in (text.find(mark, start) for mark in (*ENDS, START)) if i >= 0]
    return (min(hits), True) if hits else (len(text), False)


def _arguments(body: str) -> str:
    """A call message's body as its `arguments`: its JSON; an object that is not JSON after all
    (malformed, or cut) verbatim, as vLLM passes a harmony call's text on, so that the pieces
    streamed while it was written (its beginning, verbatim) join to it; anything else as JSON text."""
    found = partial.value_at(body, 0)
    if found is not None:
        return found[0]
    start = partial.skip(body, 0)
    return body[start:] if body.startswith("{", start) else arguments_text(body.strip())
