"""The material long-context items are composed from, per split, and the long items of the
generated sets (train's long items and the stored long.jsonl sample).

The composer is runtime code (homespec.longprompts): `homespec bench --long` sizes its prompts with
the model's own tokenizer, so it asks for document sizes no build could list in advance. What it
composes from is data, written here: the topics of each split as the source pools split them (so a
test-split document shares no subject, snippet, record kind or question family with train), the
question families split per document kind, and the fillers shared by all splits. build.py ships
it as homespec/data/prompts/long_material.json.
"""

from __future__ import annotations

import dataclasses
import json
from functools import cache

from homespec.longprompts.compose import approx_tokens, long_items
from homespec.longprompts.compose import long_prompts as _long_prompts
from homespec.longprompts.material import DEV, TEST, TRAIN, LongSource, LongWords, Material
from homespec.promptsets import PromptItem
from tools.promptgen import chat, coding, extraction, passages, rewrite, writing
from tools.promptgen.design import Draft, Pool, quota_splits, topic_splits
from tools.promptgen.words import FILLERS

__all__ = ["approx_tokens", "long_drafts", "long_prompts", "source", "source_json"]


def _of_split(pool: Pool, split: str) -> tuple:
    splits = topic_splits(pool)
    return tuple(t for t in pool.topics if splits[pool.topic_key(t)] == split)


# "key|question"; slots are filled from the document (see homespec.longprompts.compose)
QUESTIONS: dict[str, tuple[str, ...]] = {
    "newsletter": (
        "summary|Summarise this newsletter in five bullet points.",
        "locate|Which section mentions {person}, and what does it say about them?",
        "section|Write a one-paragraph summary of the section about {focus}.",
        "timeline|List every year mentioned in the newsletter, in order, with what happened.",
        "compare|Which of the {n_sections} groups or things described has the most people involved? Quote the sentence you used.",
        "problems|What problems are mentioned across the sections, and which section is each from?",
        "headline|Suggest a headline for each section.",
    ),
    "codebase": (
        "bug|One of these files has a bug. Which one is it, and how would you fix it?",
        "readme|Write a README that describes each file in one line.",
        "find|Which file contains the function that {focus}? Explain how it works.",
        "dedupe|Which files do similar things and could share code?",
        "tests|Pick the three files most in need of tests and write them.",
        "languages|List the languages used and how many files are in each.",
        "review|Review this code base: name the three most important improvements.",
    ),
    "dump": (
        "aggregate|What are the total, mean and maximum of {focus} in this data?",
        "count|How many rows are there, and how many distinct values does the first column have?",
        "outliers|Which rows look unusual, and why?",
        "summary|Describe this dataset of {noun} records in a short paragraph.",
        "top|List the five rows with the largest {focus}.",
        "schema|Describe the columns of this data and suggest a type for each.",
    ),
    "transcript": (
        "actions|List the action items from this meeting and who owns each.",
        "person|What did {person} say during the meeting? Summarise their points.",
        "minutes|Write formal minutes of this meeting.",
        "decisions|What was decided about {focus}? Quote the lines that support your answer.",
        "tone|Was the meeting productive? Give evidence from the transcript.",
        "followup|Write a follow-up email to everyone present.",
    ),
}
WORDS = LongWords(
    titles=("Quarterly", "Community", "Autumn", "Spring", "Annual"),
    when=("next week", "by Friday", "at the next meeting", "before the end of the month", "tomorrow"),
    reactions=("Agreed.", "I'm not sure that works, {name}.", "Can we come back to that?", "Good point, {name}.",
               "Let's vote on it.", "I'll need to check the budget first.", "Noted, moving on.",
               "{name}, you were going to look into that last time.", "That's a bigger change than it sounds."),
    # a "thread" item opens with the first; two of the others follow the document's own question
    thread=(
        "Read the text above and wait for my questions. First: what is it about, in two sentences?",
        "What is the single most important detail in it?",
        "Quote the part that surprised you most.",
        "If you had to cut it in half, what would you keep?",
        "What questions does it leave unanswered?",
    ),
)


@cache
def question_splits() -> dict[str, str]:
    """Question families split per document kind, so every kind has held-out questions."""
    out: dict[str, str] = {}
    for doc, questions in QUESTIONS.items():
        out |= quota_splits([f"long/{doc}-{q.split('|')[0]}" for q in questions], "template")
    return out


@cache
def split_material(split: str) -> Material:
    """What documents of `split` may be built from, as each source pool splits its own topics."""
    questions = {
        doc: tuple(tuple(q.split("|", 1)) for q in qs if question_splits()[f"long/{doc}-{q.split('|')[0]}"] == split)
        for doc, qs in QUESTIONS.items()
    }
    return Material(
        subjects=_of_split(writing.POOLS[4], split),
        snippets=_of_split(coding.POOLS[1], split),
        records=_of_split(extraction.POOLS[0], split),
        messages=_of_split(rewrite.POOLS[0], split),
        goals=_of_split(chat.POOLS[0], split),
        questions=questions,
    )


@cache
def source() -> LongSource:
    """Everything the composer draws from, for every split."""
    return LongSource(FILLERS, passages.WORDS, WORDS, {split: split_material(split) for split in (TRAIN, DEV, TEST)})


def source_json() -> bytes:
    """The shipped form of source(): homespec.longprompts.material.source_from_json reads it back."""
    return (json.dumps(dataclasses.asdict(source()), ensure_ascii=True, indent=1) + "\n").encode("utf-8")


def long_drafts(split: str, count: int, tokens: tuple[int, int], seed: int, thread_share: float = 0.2) -> list[Draft]:
    """`count` long items for `split`, each of an estimated size drawn uniformly from `tokens` (min, max)."""
    items = long_items(source(), split, count, tokens, seed, thread_share)
    return [Draft("long", "+".join(i.topics), i.family, i.turns) for i in items]


def long_prompts(n_tokens_target: int, count: int, seed: int, split: str = TEST) -> list[PromptItem]:
    """homespec.longprompts.long_prompts over the material as generated now (not as shipped)."""
    return _long_prompts(n_tokens_target, count, seed, split, source=source())
