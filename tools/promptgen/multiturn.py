"""Multi-turn conversations: a single-turn opening from another pool, then 1-2 follow-up user turns.

Only user turns are stored; the target writes the assistant turns in between when the prompts are
used. The opening keeps the split of the pool it comes from (its topic and template), and the
follow-up families are split like any other template list.
"""

from __future__ import annotations

import random
from functools import cache
from typing import Any

from tools.promptgen import chat, coding, writing
from tools.promptgen.design import Pool, Rendered, Template, families, qualified_template, template_splits, topic_splits
from tools.promptgen.words import AUDIENCES, LANGUAGES_HUMAN, NAMES

BASE_POOLS: tuple[Pool, ...] = chat.POOLS + (coding.POOLS[0], coding.POOLS[2]) + writing.POOLS[:4]

# Follow-up families: generic phrasings plus variants for the opening's category.
_FOLLOW = {
    "shorten": {
        "any": ("Can you make that shorter?", "Too long, sorry. Give me the short version.",
                "Cut that down to three sentences."),
        "coding": ("Can you make the code shorter without making it cryptic?",),
    },
    "example": {
        "any": ("Can you give me a concrete example?", "Show me how that works with a real example.",
                "An example would help. Can you add one?"),
        "coding": ("Show me an example call and its output.",),
    },
    "why": {
        "any": ("Why did you suggest that?", "What's the reasoning behind your answer?",
                "Are you sure about that? Walk me through why."),
        "coding": ("Why did you structure the code that way?",),
    },
    "constraint": {
        "chat": ("What if I only had half the budget?", "What changes if I can only do this at weekends?",
                 "What if my partner isn't keen on the idea?"),
        "coding": ("Now make it work without any loops.", "Now handle empty input and invalid values.",
                   "Can it be done using constant extra memory?"),
        "writing": ("Now make it funnier.", "Rewrite it for a much older audience.",
                    "Keep it, but change the ending."),
        "any": ("What if I had much less time?",),
    },
    "format": {
        "any": ("Put that in a table.", "Turn that into a checklist I can print.",
                "Summarise your answer as three bullet points."),
        "coding": ("Add type hints and a docstring.", "Add comments to the tricky parts."),
        "writing": ("Give it a title.", "Format it as it would appear on a poster."),
    },
    "audience": {
        "any": ("Now explain it to {audience}.", "How would you put that for {audience}?"),
    },
    "translate": {
        "any": ("Translate your last answer into {language}.", "Could you say that in {language}?"),
        "coding": ("Rewrite it in {lang}.", "How would this look in {lang}?"),
    },
    "critique": {
        "any": ("What are the weaknesses of what you just wrote?", "Play devil's advocate against your answer."),
        "coding": ("Review your own code: what could go wrong?", "What tests would catch bugs in this?"),
        "writing": ("What would an editor change?", "Which line is the weakest, and how would you fix it?"),
    },
    "personal": {
        "any": ("Thanks. My friend {name} has the same question. Anything you'd tell them differently?",
                "That's helpful. What would you do first, if you were me?"),
    },
    "more": {
        "any": ("Tell me more about the second point.", "Go deeper on that, please.", "What did you leave out?"),
        "writing": ("Write a second part that continues it.", "Write another one in a different style."),
        "coding": ("Extend it to also report how long it took.", "Now make it a command-line tool."),
    },
    "check": {
        "any": ("Can you double-check your answer for mistakes?", "Is any of that out of date or uncertain?"),
        "coding": ("Trace through your code with a small input to check it.",),
    },
}


def _follow_text(family: str, category: str, rng: random.Random) -> str:
    options = _FOLLOW[family].get(category, ()) + _FOLLOW[family].get("any", ())
    if not options:
        options = tuple(p for v in _FOLLOW[family].values() for p in v)
    return rng.choice(options).format(
        audience=rng.choice(AUDIENCES), language=rng.choice(LANGUAGES_HUMAN), lang=rng.choice(coding.LANGS),
        name=rng.choice(NAMES),
    )


@cache
def _follow_split() -> dict[str, str]:
    return template_splits(POOL)


@cache
def _base_split(pool_index: int) -> dict[str, str]:
    return topic_splits(BASE_POOLS[pool_index])


def _opening(topic: tuple[int, Any], rng: random.Random) -> tuple[str, str]:
    """The first user turn and its template family, drawn from the base pool's templates in the same split."""
    index, base_topic = topic
    pool = BASE_POOLS[index]
    split = _base_split(index)[pool.topic_key(base_topic)]
    _, templates = families(pool, split)
    template = rng.choice(templates)
    rendered = template.render(base_topic, rng)
    return (rendered if isinstance(rendered, str) else rendered[0]), qualified_template(pool, template)


def _followup(family: str) -> Template:
    def render(topic: tuple[int, Any], rng: random.Random) -> Rendered:
        first, opening_family = _opening(topic, rng)
        category = BASE_POOLS[topic[0]].category
        turns = [first, _follow_text(family, category, rng)]
        also = [opening_family]
        split = _base_split(topic[0])[_topic_key(topic)]
        others = [f for f in _FOLLOW if f != family and _follow_split()[f"{POOL.name}/{f}"] == split]
        if others and rng.random() < 0.5:
            # a third turn from another follow-up family of the same split, so a conversation makes
            # two different moves and a held-out family never appears in train even as a third turn
            other = rng.choice(others)
            turns.append(_follow_text(other, category, rng))
            also.append(f"{POOL.name}/{other}")
        return Rendered(tuple(turns), also=tuple(also))

    return Template(family, render)


TOPICS = tuple((i, t) for i, pool in enumerate(BASE_POOLS) for t in pool.topics)


def _topic_key(topic: tuple[int, Any]) -> str:
    return BASE_POOLS[topic[0]].topic_key(topic[1])


POOL = Pool(
    "multiturn.followup",
    "multiturn",
    TOPICS,
    tuple(_followup(f) for f in _FOLLOW),
    share=1.0,
    topic_key=_topic_key,
    topic_split=lambda t: _base_split(t[0])[_topic_key(t)],
)

