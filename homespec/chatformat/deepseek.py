"""DeepSeek V3 / R1 calls, in DeepSeek's call tokens. V3 and R1 write the type, the name and the
arguments in a fenced block:

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather
    ```json
    {"city": "Paris"}
    ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>

V3.1 and later the name and the JSON alone: `<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜>`.
"""

from __future__ import annotations

from typing import Any, Sequence

from homespec.chatformat import partial
from homespec.chatformat.base import Parsed, Term, ToolCall, Writing, held_prefix, lark_json, lark_string, parameters

CALLS_BEGIN, CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_BEGIN, CALL_END, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
FENCE = "```json"


class DeepSeek:
    name = "deepseek"
    needs_special = True
    reads_reasoning = False

    def __init__(self, fenced: bool = True) -> None:
        self.fenced = fenced  # V3 / R1: type, name and a fenced block; V3.1: name and JSON

    def parse(self, text: str, final: bool) -> Parsed:
        at = min((i for i in (text.find(CALLS_BEGIN), text.find(CALL_BEGIN)) if i >= 0), default=-1)
        if at < 0:
            return Parsed(text if final else text[:len(text) - held_prefix(text, [CALLS_BEGIN, CALL_BEGIN])])
        calls: list[ToolCall] = []
        writing, stop = None, len(text)
        pos = text.find(CALL_BEGIN, at)
        for piece in text[at:].split(CALL_BEGIN)[1:]:
            body, closed, _ = piece.partition(CALL_END)
            if not (closed or final):  # the last call, still coming
                held = body[:len(body) - held_prefix(body, [CALL_END])]
                writing = _writing(held)
                break
            call = _read(body)
            if call is None:
                stop = at if not calls else pos
                break
            calls.append(call)
            pos += len(CALL_BEGIN) + len(piece)
        if not final:
            return Parsed(text[:at], tuple(calls), writing=writing)
        if not calls:
            return Parsed(text)
        # the calls read stay calls; only the rest that does not read as one is content, where it
        # stood (as llama.cpp's parsers keep the calls they found): a call streamed is never taken back
        return Parsed((text[:at] + text[stop:]).strip(), tuple(calls))

    def call_grammar(self, tools: Sequence[dict[str, Any]], parallel: bool, term: Term) -> str:
        rules = []
        for i, tool in enumerate(tools):
            name = tool["function"]["name"]
            head = f'"function" {term(SEP)} {lark_string(name + chr(10) + FENCE + chr(10))}' if self.fenced \
                else f"{lark_string(name)} {term(SEP)}"
            tail = lark_string("\n```") if self.fenced else ""
            rules.append(f"call{i}: {term(CALL_BEGIN)} {head} {lark_json(parameters(tool))} {tail} {term(CALL_END)}")
        calls = "call call*" if parallel else "call"
        return (f"start: {term(CALLS_BEGIN)} {calls} {term(CALLS_END)}\n"
                f"call: {' | '.join(f'call{i}' for i in range(len(tools)))}\n" + "\n".join(rules) + "\n")


def _read(body: str) -> ToolCall | None:
    head = _head(body)
    found = partial.value_at(body, head[1]) if head is not None else None
    return ToolCall(head[0], found[0]) if head is not None and found is not None else None


def _writing(body: str) -> Writing | None:
    head = _head(body)
    held = partial.object_so_far(body, head[1]) if head is not None else None
    return Writing(head[0], held) if head is not None and held is not None else None


def _head(body: str) -> tuple[str, int] | None:
    """The call's name, once it is written whole, and where its JSON begins."""
    left, sep, right = body.partition(SEP)
    if not sep:
        return None
    at = len(left) + len(SEP)
    if left.strip() != "function":  # V3.1: the name, the separator, the JSON
        return left.strip(), at
    name, newline, _ = right.partition("\n")  # V3 / R1: the name on the first line, then the fenced JSON
    if not newline:
        return None
    at = partial.skip(body, at + len(name) + 1)
    if body.startswith(FENCE, at):
        at += len(FENCE)
    elif FENCE.startswith(body[at:]):  # the fence still being written
        return None
    return name.strip(), at
