"""The grammar a request asks for, compiled before it takes a slot (homespec.grammar):

* `response_format: {"type": "json_schema", "json_schema": {"schema": ...}}`: that schema;
  `{"type": "json_object"}`: any JSON object (with llama-server's `schema` beside it: that schema);
* llama-server's own fields: `json_schema` (a schema) and `grammar` (GBNF, read through llguidance);
* `tool_choice: "required"` or a named function (chat, with tools): one call of those tools in the
  syntax of the model's template (homespec.chatformat), parallel ones if `parallel_tool_calls`.

A schema or grammar that does not compile is a 400 naming the field.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Callable

from homespec.grammar import Grammar, GrammarError, json_object, json_schema, lark, vocabulary
from homespec.server.errors import ApiError

if TYPE_CHECKING:
    from homespec.chatformat import ToolFormat
    from homespec.contracts.backend import Tokenizer
    from homespec.server.schemas import Sampling


def requested(tok: "Tokenizer", body: "Sampling") -> Grammar | None:
    """The grammar of response_format / json_schema / grammar (None: free text)."""
    fmt = getattr(body, "response_format", None)
    try:
        if fmt is not None and fmt.type == "json_schema":
            spec = fmt.json_schema
            if spec is None or spec.schema_ is None:
                raise ApiError(400, "response_format.json_schema.schema is missing: send the JSON schema the "
                               "answer must follow", param="response_format.json_schema")
            return json_schema(spec.schema_, vocabulary(tok), f"the JSON schema '{spec.name}'")
        if fmt is not None and fmt.type == "json_object":
            return json_schema(fmt.schema_, vocabulary(tok)) if fmt.schema_ is not None else json_object(vocabulary(tok))
        if body.json_schema is not None:
            return json_schema(body.json_schema, vocabulary(tok))
        if body.grammar is not None:
            return lark(_gbnf_as_lark(body.grammar), vocabulary(tok), "the grammar")
    except GrammarError as e:
        param = "response_format" if fmt is not None and fmt.type != "text" else \
            "json_schema" if body.json_schema is not None else "grammar"
        raise ApiError(400, f"{param}: {e.message}", param=param) from None
    return None


def tool_call(tok: "Tokenizer", fmt: "ToolFormat", tools: list[dict[str, Any]], parallel: bool) -> Grammar:
    """One call (or several) of `tools`, as the template's format writes them."""
    vocab = vocabulary(tok)
    source = fmt.call_grammar(tools, parallel, marker_term(tok, vocab))
    try:
        return lark(source, vocab, "the tools' parameters")
    except GrammarError as e:
        raise ApiError(400, f"tools: {e.message}", param="tools") from None


def marker_term(tok: "Tokenizer", vocab: Any) -> Callable[[str], str]:
    """A format's marker as a grammar term: the special token's id (`<[id]>`) when the vocabulary
    has it as one special token (gpt-oss's <|channel|>, Mistral's [TOOL_CALLS]), else its text."""
    def term(text: str) -> str:
        ids = tok.encode(text, add_bos=False, special=True)
        if len(ids) == 1 and vocab.is_special_token(ids[0]):
            return f"<[{ids[0]}]>"
        return json.dumps(text, ensure_ascii=False)

    return term


def _gbnf_as_lark(gbnf: str) -> str:
    from llguidance import gbnf_to_lark

    try:
        return gbnf_to_lark(gbnf)
    except Exception as e:  # noqa: BLE001 - llguidance's converter raises what its parser raises
        raise GrammarError(f"the GBNF grammar cannot be read: {' '.join(str(e).split())}",
                           hint="check the grammar") from None
