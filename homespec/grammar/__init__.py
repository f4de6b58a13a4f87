"""Constrained decoding: a grammar (a JSON schema, any JSON object, a Lark grammar) compiled with
llguidance against the model's own vocabulary, and the per-request state (`Guide`) that masks
both halves of a speculative step: drafted nodes the grammar forbids are cut before the target
pass, and the target's distribution at every tree node is masked by the grammar's state after
that node's path (docs/speculative.md, "Constrained decoding").

    grammar = json_schema({"type": "object", ...}, vocabulary(tokenizer))   # checked once, per request
    guide = grammar.start()                                                  # one per answer
"""

from homespec.grammar.compile import Grammar, GrammarError, check_size, json_object, json_schema, lark
from homespec.grammar.guide import Guide
from homespec.grammar.vocab import vocabulary

__all__ = ["Grammar", "GrammarError", "Guide", "check_size", "json_object", "json_schema", "lark", "vocabulary"]
