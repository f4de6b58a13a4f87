"""The grammar a request asks for, compiled before it takes a slot (homespec.grammar):

* `response_format: {"type": "json_schema", "json_schema": {"schema": ...}}`: that schema;
  `{"type": "json_object"}`: any JSON object (with llama-server's `schema` beside it: that schema);
* llama-server's own fields: `json_schema` (a schema) and `grammar` (GBNF, read through llguidance);
* `tool_choice: "required"` or a named function (chat, with tools): one call of those tools in the
  syntax of the model's template (homespec.chatformat), parallel ones if `parallel_tool_calls`.

A schema or grammar that does not compile (or would not in time: homespec.grammar.compile's
bounds) is a 400 naming the field, and so is a request that asks for two constraints at once.
Compiling happens here, on the request's worker thread and the compiler's, never the engine's.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Callable

from homespec.grammar import Grammar, GrammarError, check_size, json_object, json_schema, lark, vocabulary
from homespec.server.errors import ApiError

if TYPE_CHECKING:
    from homespec.chatformat import ToolFormat
    from homespec.contracts.backend import Tokenizer
    from homespec.server.schemas import Sampling


def requested(tok: "Tokenizer", body: "Sampling") -> Grammar | None:
    """The grammar of response_format / json_schema / grammar (None: free text)."""
    fmt = getattr(body, "response_format", None)
    asked = [name for name, given in (("response_format", fmt is not None and fmt.type != "text"),
                                      ("json_schema", body.json_schema is not None),
                                      ("grammar", body.grammar is not None)) if given]
    if len(asked) > 1:  # one would be dropped without a word
        raise ApiError(400, f"{' and '.join(asked)} both constrain the answer: send one of them", param=asked[1])
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
            return lark(gbnf_as_lark(body.grammar), vocabulary(tok), "the grammar")
    except GrammarError as e:
        raise ApiError(400, f"{asked[0]}: {e.message}", param=asked[0]) from None
    return None


def tool_call(tok: "Tokenizer", fmt: "ToolFormat", tools: list[dict[str, Any]], parallel: bool) -> Grammar:
    """One call (or several) of `tools`, as the template's format writes them."""
    vocab = vocabulary(tok)
    try:
        for t in tools:
            check_size(t["function"].get("parameters"), f"the parameters of '{t['function']['name']}'")
        return lark(fmt.call_grammar(tools, parallel, marker_term(tok, vocab)), vocab, "the tools' parameters")
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


def gbnf_as_lark(gbnf: str) -> str:
    """llama.cpp's GBNF (llama-server's `grammar` field) as llguidance's Lark, through llguidance's
    own converter. What the converter raises is about the grammar; a converter homespec cannot
    reach is homespec's fault, and left to be a 500 (never blamed on the grammar)."""
    from llguidance.gbnf_to_lark import gbnf_to_lark  # the function, in a module of the same name

    try:
        return gbnf_to_lark(gbnf)
    except (TypeError, AttributeError, NameError, ImportError):
        raise  # a fault in the converter's use, not in the grammar
    except Exception as e:  # noqa: BLE001 - the converter raises plain Exception for bad GBNF (and RecursionError)
        raise GrammarError(f"the GBNF grammar cannot be read: {' '.join(str(e).split())}",
                           hint="write it as llama.cpp's GBNF, with a root rule: root ::= \"yes\" | \"no\"") from None
