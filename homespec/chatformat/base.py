"""What every tool-call format shares: a parsed call, a parsed answer, the Format protocol, and the
small text helpers the parsers use (a marker's beginning held back while an answer streams)."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

# a marker (e.g. "<tool_call>") as a grammar writes it: the literal text, or a special token's id
# spelled `<[id]>`, which only the tokenizer knows (the caller supplies it)
Term = Callable[[str], str]


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    arguments: str  # JSON text, as OpenAI sends it
    id: str = field(default_factory=lambda: "call_" + secrets.token_hex(12))
    at: int = field(default=-1, compare=False)  # where its markup begins in the answer (-1: not said)


@dataclass(frozen=True, slots=True)
class Writing:
    """The call being written, once its name and the key of its first argument are certain:
    `arguments` is the beginning of its final `arguments` text that can no longer change."""

    name: str
    arguments: str
    at: int = -1  # where its markup begins in the answer (-1: not said), as ToolCall.at


@dataclass(frozen=True, slots=True)
class Parsed:
    """An answer read back: visible text, thinking, calls. While the answer is still coming
    (`final=False` to a parser) `content` stops before anything that may yet turn into a call, and
    `writing` is the call after `calls` still being written (None: none, or not yet certain; a
    format that cannot say leaves it None, and its calls go out whole)."""

    content: str
    calls: tuple[ToolCall, ...] = ()
    reasoning: str = ""
    writing: Writing | None = None


class ToolFormat(Protocol):
    name: str
    needs_special: bool  # its markers are special tokens: parse text decoded with them spelled out
    reads_reasoning: bool  # its own syntax carries the thinking (harmony's analysis channel)

    def parse(self, text: str, final: bool) -> Parsed: ...

    def call_grammar(self, tools: Sequence[dict[str, Any]], parallel: bool, term: Term) -> str:
        """A Lark grammar (llguidance's dialect) of one call (`parallel`: one or more) of `tools`."""
        ...


def held_prefix(text: str, markers: Sequence[str]) -> int:
    """How many characters at the end of `text` could begin one of `markers` (held back while
    streaming: "<tool" may become "<tool_call>")."""
    best = 0
    for m in markers:
        for n in range(min(len(m) - 1, len(text)), best, -1):
            if text.endswith(m[:n]):
                best = n
                break
    return best


def arguments_text(value: Any) -> str:
    """A call's arguments as OpenAI's JSON text (a string that is already JSON stays as it is)."""
    if isinstance(value, str):
        try:
            json.loads(value)
            return value
        except ValueError:
            return json.dumps(value, ensure_ascii=False)
    return json.dumps(value if value is not None else {}, ensure_ascii=False)


def call_schema(tools: Sequence[dict[str, Any]], name_key: str = "name", args_key: str = "arguments",
                at: str = "") -> dict:
    """The JSON schema of one call object {name, arguments} of any of `tools`. `at`: where this
    schema sits in the document it is written into (a JSON pointer; "" for its root): each tool's
    own references (`#/$defs/Loc`, what pydantic writes for nested models) are rebased onto the
    place its parameters take there, so they resolve as they did in the tool's own schema."""
    one = len(tools) == 1
    options = [{"type": "object",
                "properties": {name_key: {"const": t["function"]["name"]},
                               args_key: rebased(parameters(t), f"{at}{'' if one else f'/anyOf/{i}'}"
                                                                f"/properties/{_escape(args_key)}")},
                "required": [name_key, args_key], "additionalProperties": False} for i, t in enumerate(tools)]
    return options[0] if one else {"anyOf": options}


# keywords whose values are data, not schemas: a "$ref" inside them is left alone
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples", "example"})


def rebased(schema: Any, at: str) -> Any:
    """`schema` with every document-local reference (`#`, `#/...`) moved under the JSON pointer
    `at`: the schema as it reads once embedded there. Other references (URLs, `other.json#/x`) stay."""
    if not at:
        return schema
    if isinstance(schema, list):
        return [rebased(v, at) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "$ref" and isinstance(value, str) and value.startswith("#"):
            out[key] = "#" + at + value[1:] if value[1:2] in ("", "/") else value  # "#anchor" names no path
        elif key in _DATA_KEYWORDS:
            out[key] = value
        elif key in ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas"):
            out[key] = {k: rebased(v, at) for k, v in value.items()} if isinstance(value, dict) else value
        else:
            out[key] = rebased(value, at)
    return out


def _escape(key: str) -> str:
    """A key as one JSON pointer token (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def parameters(tool: dict[str, Any]) -> dict:
    """A tool's parameter schema (an object of anything when it gives none). Its properties are all
    the keys a forced call may write unless it says `additionalProperties` (a small model otherwise
    copies the schema's own keywords, "type" and "enum", into the arguments)."""
    params = tool["function"].get("parameters")
    if not isinstance(params, dict) or not params:
        return {"type": "object"}
    if "properties" in params and "additionalProperties" not in params:
        return {**params, "additionalProperties": False}
    return params


def lark_json(schema: dict) -> str:
    return "%json " + json.dumps(schema, ensure_ascii=False)


def lark_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)
