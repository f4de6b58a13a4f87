"""Grammars, checked when a request arrives: a JSON schema, any JSON object, or a Lark grammar
(llguidance's dialect, which embeds JSON schemas with `%json{...}`), each compiled against the
model's vocabulary. A grammar that does not compile is the client's error, said before the request
takes a slot."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from homespec.errors import HomespecError
from homespec.grammar.guide import Guide

# llguidance's JSON options: whitespace between tokens as the model likes it (models pretty-print;
# forcing compact JSON moves the answer away from what the model means: SmolLM2 then gives a
# different age for the same person). A bounded pattern such as [\n ]{0,32} would cost 28 ms a
# mask instead of 0.1 ms (it defeats llguidance's vocabulary slices); max_tokens bounds the rest.
JSON_OPTIONS = {"whitespace_flexible": True}


class GrammarError(HomespecError):
    """A schema or grammar that does not compile (the request's 400)."""


@dataclass(frozen=True)
class Grammar:
    """A compiled grammar for one vocabulary; `start()` gives each answer its own Guide."""

    source: str  # llguidance's grammar (its JSON form)
    what: str  # for messages: "the JSON schema 'person'"
    vocab: Any = field(repr=False, compare=False)  # llguidance.LLTokenizer

    def start(self) -> Guide:
        from llguidance import LLMatcher

        return Guide(LLMatcher(self.vocab, self.source, log_level=0), self.vocab.vocab_size,
                     tuple(self.vocab.eos_tokens))


def json_schema(schema: Any, vocab: Any, what: str = "the JSON schema") -> Grammar:
    """A grammar whose strings are the JSON documents valid under `schema`."""
    from llguidance import LLMatcher

    if not isinstance(schema, dict):
        raise GrammarError(f"{what} must be a JSON object, not {type(schema).__name__}",
                           hint='send e.g. {"type": "object", "properties": {...}}')
    try:
        source = LLMatcher.grammar_from_json_schema(json.dumps(schema), defaults=JSON_OPTIONS)
    except (ValueError, TypeError) as e:
        raise GrammarError(f"{what} cannot be read: {e}", hint="check the schema") from None
    return _checked(source, vocab, what)


def json_object(vocab: Any) -> Grammar:
    """Any JSON object (OpenAI's `response_format: {"type": "json_object"}`)."""
    return json_schema({"type": "object"}, vocab, "a JSON object")


def lark(text: str, vocab: Any, what: str = "the grammar") -> Grammar:
    from llguidance import LLMatcher

    return _checked(LLMatcher.grammar_from_lark(text), vocab, what)


def _checked(source: str, vocab: Any, what: str) -> Grammar:
    from llguidance import LLMatcher

    is_error, messages = LLMatcher.validate_grammar_with_warnings(source, vocab)
    if is_error:
        raise GrammarError(f"{what} cannot be compiled: {' '.join(messages[0].split())}",
                           hint="use the JSON Schema keywords llguidance supports (docs/server.md, "
                                "\"Structured output\")")
    return Grammar(source, what, vocab)
