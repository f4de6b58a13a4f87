"""Edit tasks: change a given piece of code or prose and hand it back whole, the work home users
give coding tools most (add types, rename, fix this function, refactor, correct this paragraph).
Their answers copy long stretches of the prompt, which is what prompt lookup and suffix drafting
draft for free; `homespec bench --prompts edit` measures it (docs/prompts.md, "The edit set").

One pool per kind of edit, each with several phrasings, so every kind has phrasings held out for
dev and test. Snippets and passages take their split from the pools that own them (coding,
rewrite), so an edit prompt's material is held out exactly where theirs is.
"""

from __future__ import annotations

import random
import re

from tools.promptgen import coding, rewrite
from tools.promptgen.design import Pool, Template, topic_splits
from tools.promptgen.passages import SUBJECTS, Subject, passage
from tools.promptgen.rewrite import MESSAGES, add_errors
from tools.promptgen.snippets import SNIPPETS, Snippet, render_snippet
from tools.promptgen.words import NAMES

TYPED = ("python", "typescript")  # languages whose type annotations are optional
NEW_NAMES = ("compute", "process_items", "handle", "run_check", "convert", "collect", "result_of", "apply_rule")

_ADD_TYPES = (
    "Add type hints to this {lang} code. Return the whole code, otherwise unchanged.",
    "Annotate every parameter and return value in this function with types, and give me back the full code.",
    "Please add type annotations to the following code and show the complete result.",
    "Make this code fully typed (parameters and return types). Don't change anything else; output all of it.",
    "Add types to this {lang} code so a type checker is happy. Reply with the full updated code.",
    "Type-annotate this function. Keep the body exactly as it is.",
    "Give this {lang} code type hints throughout and return it in full.",
)
_RENAME = (
    "Rename `{old}` to `{new}` everywhere in this code and return the whole code.",
    "In the code below, change the name `{old}` to `{new}`. Show the full code afterwards.",
    "Please rename {old} to {new} in this {lang} code. Output the complete file.",
    "Replace the identifier `{old}` with `{new}` throughout. Nothing else should change; print the result.",
    "I want `{old}` to be called `{new}`. Update this code and give it back in full.",
    "Do a rename refactoring: `{old}` becomes `{new}`. Return the entire code.",
    "Rename {old} -> {new} in this snippet and return it.",
)
_FIX = (
    "This {lang} function should be one that {purpose}, but it has a bug. Fix it and return the whole corrected code.",
    "Find the bug in this code and give me the fixed version in full.",
    "There's a mistake in this {lang} code. Return the corrected code, changing as little as possible.",
    "Fix this function (it is meant to be one that {purpose}). Reply with the full fixed code only.",
    "Something in this code is off by a little. Correct it and show all of the code.",
    "Debug this {lang} snippet and return it with the bug fixed.",
    "Repair the faulty line in this code and output the complete, working version.",
)
_REFACTOR = (
    "Refactor this {lang} code for readability without changing its behaviour. Return the whole code.",
    "Clean up this code: better structure, same behaviour. Give me the full refactored version.",
    "Add a docstring and comments to this {lang} code and return all of it.",
    "Rewrite this function so that it is easier to test, keeping what it does. Show the complete code.",
    "Add input validation at the start of this function and return the full code.",
    "Make this code more idiomatic {lang}. Keep the behaviour and return everything.",
    "Add logging of the inputs at the start of this function; return the whole function.",
)
_REWRITE = (
    "Correct the spelling and grammar in this text. Return the corrected text only.\n\n{broken}",
    "Replace the name {name} with {new_name} in this text and return it, otherwise unchanged.\n\n{named}",
    "Put this text in the past tense and return it.\n\n{text}",
    "Fix any typos in the following and give it back in full:\n\n{broken}",
    "Change every mention of {name} to {new_name}. Return the whole text.\n\n{named}",
    "Add a short title above this text and return the text with the title.\n\n{text}",
    "Proofread this and return the corrected version, keeping the wording where it is fine.\n\n{broken}",
)


def _fenced(snippet: Snippet, code: str) -> str:
    return f"```{snippet.lang}\n{code}\n```"


def _first_name(snippet: Snippet, code: str) -> str:
    """The identifier of the snippet's first slot as this rendering chose it."""
    _, options = snippet.names[0]
    return next(o for o in options if re.search(rf"\b{re.escape(o)}\b", code))


def _code_template(kind: str, i: int, phrasing: str) -> Template:
    def render(snippet: Snippet, rng: random.Random) -> str:
        code = render_snippet(snippet, rng, buggy=kind == "fix-bug")
        old = _first_name(snippet, code) if kind == "rename" else ""
        new = rng.choice([n for n in NEW_NAMES if n != old])
        ask = phrasing.format(lang=snippet.lang, purpose=snippet.purpose, old=old, new=new)
        return f"{ask}\n\n{_fenced(snippet, code)}"

    return Template(f"{kind}-{i}", render)


def _prose_template(i: int, phrasing: str, source) -> Template:
    def render(topic, rng: random.Random) -> str:
        text = source(topic, rng)
        name = next((n for n in NAMES if re.search(rf"\b{n}\b", text)), None)
        if name is None:  # a text without a first name gets one to replace
            name = rng.choice(NAMES)
            text = f"{name} wrote this: {text}"
        new_name = rng.choice([n for n in NAMES if n != name])
        return phrasing.format(text=text, broken=add_errors(text, rng), named=text, name=name, new_name=new_name)

    return Template(f"rewrite-{i}", render)


def _passage_text(subject: Subject, rng: random.Random) -> str:
    return passage(subject, rng, n_sentences=rng.randint(3, 6))[1]


def _message_text(message: str, rng: random.Random) -> str:
    return message


_SNIPPET_SPLIT = topic_splits(coding.POOLS[1])
_PASSAGE_SPLIT = topic_splits(rewrite.POOLS[1])
_MESSAGE_SPLIT = topic_splits(rewrite.POOLS[0])


def _code_pool(kind: str, phrasings: tuple[str, ...], snippets: tuple[Snippet, ...], share: float) -> Pool:
    return Pool(f"edit.{kind}", kind, snippets, tuple(_code_template(kind, i, p) for i, p in enumerate(phrasings)),
                share=share, topic_key=lambda s: "snippet:" + s.key,
                topic_split=lambda s: _SNIPPET_SPLIT["snippet:" + s.key])


POOLS = (
    _code_pool("add-types", _ADD_TYPES, tuple(s for s in SNIPPETS if s.lang in TYPED), 1.0),
    _code_pool("rename", _RENAME, SNIPPETS, 1.0),
    _code_pool("fix-bug", _FIX, tuple(s for s in SNIPPETS if "<<<" in s.code), 1.0),
    _code_pool("refactor", _REFACTOR, SNIPPETS, 1.0),
    Pool("edit.rewrite.passage", "rewrite", SUBJECTS,
         tuple(_prose_template(i, p, _passage_text) for i, p in enumerate(_REWRITE)), share=0.7,
         topic_key=lambda s: s.key, topic_split=lambda s: _PASSAGE_SPLIT[s.key], family="edit.rewrite"),
    Pool("edit.rewrite.message", "rewrite", MESSAGES,
         tuple(_prose_template(i, p, _message_text) for i, p in enumerate(_REWRITE)), share=0.3,
         topic_key=lambda m: "message:" + m, topic_split=lambda m: _MESSAGE_SPLIT["message:" + m],
         family="edit.rewrite"),
)
KINDS = ("add-types", "rename", "fix-bug", "refactor", "rewrite")
