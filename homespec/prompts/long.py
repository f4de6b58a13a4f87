"""Long-context items: a composed document, code base, data dump or meeting transcript of a requested
size, followed by a question about it (or, for "thread" items, several questions as separate turns).

Sizes are estimated without a tokenizer: a prose word is ~1/0.75 tokens and a character ~1/4 token
(the usual rules of thumb for English with a BPE tokenizer); the larger of the two estimates counts,
so CSV dumps and code, which have few spaces, are not undercounted.
Every document is drawn only from the families of one split, so a test-split document shares no
subject, snippet, record kind or question family with train.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from homespec.errors import UsageError
from homespec.prompts import chat, coding, extraction, rewrite, writing
from homespec.prompts.design import DEV, TEST, TRAIN, Draft, Pool, quota_splits, topic_splits
from homespec.prompts.items import PromptItem
from homespec.prompts.passages import Subject, passage
from homespec.prompts.records import RecordKind, as_csv, as_markdown, draw_records
from homespec.prompts.snippets import Snippet, render_snippet
from homespec.prompts.words import NAMES

WORDS_PER_TOKEN = 0.75
CHARS_PER_TOKEN = 4.0


@dataclass(frozen=True, slots=True)
class Material:
    """What documents of one split may be built from, as each source pool splits its own topics."""

    subjects: list[Subject]
    snippets: list[Snippet]
    records: list[RecordKind]
    messages: list[str]
    goals: list[str]


def _of_split(pool: Pool, split: str) -> list:
    splits = topic_splits(pool)
    return [t for t in pool.topics if splits[pool.topic_key(t)] == split]


@cache
def _split_material(split: str) -> Material:
    return Material(
        subjects=_of_split(writing.POOLS[4], split),
        snippets=_of_split(coding.POOLS[1], split),
        records=_of_split(extraction.POOLS[0], split),
        messages=_of_split(rewrite.POOLS[0], split),
        goals=_of_split(chat.POOLS[0], split),
    )


def approx_tokens(text: str) -> int:
    return int(max(len(text.split()) / WORDS_PER_TOKEN, len(text) / CHARS_PER_TOKEN))


def _newsletter(split: str, tokens: int, rng: random.Random) -> tuple[str, list[str], dict[str, str]]:
    material = _split_material(split)
    subjects = list(material.subjects)
    rng.shuffle(subjects)
    parts = [f"# The {rng.choice(('Quarterly', 'Community', 'Autumn', 'Spring', 'Annual'))} Round-up\n"]
    used: list[Subject] = []
    facts_by_name: dict[str, str] = {}
    while approx_tokens("\n".join(parts)) < tokens:
        if subjects:
            subject = subjects.pop()
            # a sentence is ~25 tokens: size the last sections to what is left of the budget
            left = tokens - approx_tokens("\n".join(parts))
            facts, text = passage(subject, rng, n_sentences=max(3, min(rng.randint(6, 12), left // 25 + 1)))
            parts.append(f"## {subject.name[0].upper() + subject.name[1:]}\n\n{text}\n")
            used.append(subject)
            facts_by_name[subject.name] = facts.founder
        elif rng.random() < 0.5:
            # once the split's subjects are used up, letters and listings keep the text varied
            letters = rng.sample(material.messages, k=min(3, len(material.messages)))
            parts.append("## Letters\n\n" + "\n\n".join(f"\"{m}\" ({rng.choice(NAMES)})" for m in letters) + "\n")
        else:
            kind = rng.choice(material.records)
            parts.append(f"## Listings: {kind.key.replace('-', ' ')}\n\n{as_markdown(kind, draw_records(kind, rng, rng.randint(6, 14)))}\n")
    focus = rng.choice(used)
    slots = {"focus": focus.name, "person": facts_by_name[focus.name], "n_sections": str(len(used))}
    return "\n".join(parts), [s.key for s in used], slots


def _codebase(split: str, tokens: int, rng: random.Random) -> tuple[str, list[str], dict[str, str]]:
    material = _split_material(split)
    snippets = list(material.snippets)
    parts, used = [], []
    buggy_index = rng.randrange(min(10, len(snippets)))
    i = 0
    while approx_tokens("\n".join(parts)) < tokens:
        if i >= len(snippets) and rng.random() < 0.6:
            # past the split's snippets, data fixtures keep a large code base from repeating itself
            kind = rng.choice(material.records)
            rows = draw_records(kind, rng, rng.randint(3, 8))
            parts.append(f"=== file: fixtures/{kind.key}_{len(parts)}.json ===\n{json.dumps(rows, indent=2)}\n")
            continue
        if i % len(snippets) == 0:
            rng.shuffle(snippets)
        snippet = snippets[i % len(snippets)]
        name = f"{snippet.key.split('-', 1)[1].replace('-', '_')}_{i}"
        parts.append(f"=== file: src/{name}.{_EXT.get(snippet.lang, 'txt')} ===\n{render_snippet(snippet, rng, buggy=i == buggy_index)}\n")
        used.append(snippet)
        i += 1
    focus = rng.choice(used)
    return "\n".join(parts), sorted({"snippet:" + s.key for s in used}), {"focus": focus.purpose, "n_sections": str(i)}


_EXT = {"python": "py", "javascript": "js", "typescript": "ts", "go": "go", "rust": "rs", "c": "c",
        "java": "java", "sql": "sql", "bash": "sh"}


def _dump(split: str, tokens: int, rng: random.Random) -> tuple[str, list[str], dict[str, str]]:
    kind = rng.choice(_split_material(split).records)
    rows = draw_records(kind, rng, 5)
    while approx_tokens(as_csv(kind, rows)) < tokens:
        rows += draw_records(kind, rng, max(1, len(rows) // 4))
    n_rows = len(rows)
    focus = rng.choice(kind.numeric or tuple(f.name for f in kind.fields))
    return as_csv(kind, rows), ["records:" + kind.key], {"focus": focus, "n_sections": str(n_rows), "noun": kind.noun}


def _transcript(split: str, tokens: int, rng: random.Random) -> tuple[str, list[str], dict[str, str]]:
    material = _split_material(split)
    people = rng.sample(NAMES, rng.randint(3, 6))
    subject = rng.choice(material.subjects)
    _, text = passage(subject, rng, n_sentences=12)
    sentences = [s.strip().rstrip(".") + "." for s in text.split(". ") if s.strip()]
    lines_out = [f"Meeting notes: {subject.name}. Present: {', '.join(people)}.", ""]
    minute = 0
    while approx_tokens("\n".join(lines_out)) < tokens:
        minute += rng.randint(1, 3)
        speaker, other = rng.sample(people, 2)
        roll = rng.random()
        if roll < 0.25:
            said = rng.choice(material.messages)
        elif roll < 0.5:
            said = rng.choice(sentences)
        elif roll < 0.7:
            kind = rng.choice(material.records)
            row = draw_records(kind, rng, 1)[0]
            field = rng.choice(kind.fields).name
            said = f"Quick check on {kind.noun}: the {field.replace('_', ' ')} is {row[field]}, {other}, can you confirm?"
        elif roll < 0.85:
            said = f"Action for {other}: {rng.choice(material.goals)}, report back {rng.choice(_WHEN)}."
        else:
            said = rng.choice(_REACTIONS).format(name=other)
        lines_out.append(f"[{minute // 60:02d}:{minute % 60:02d}] {speaker}: {said}")
    return "\n".join(lines_out), [subject.key], {
        "focus": subject.name, "person": rng.choice(people), "n_sections": str(len(lines_out))}


_WHEN = ("next week", "by Friday", "at the next meeting", "before the end of the month", "tomorrow")
_REACTIONS = ("Agreed.", "I'm not sure that works, {name}.", "Can we come back to that?", "Good point, {name}.",
              "Let's vote on it.", "I'll need to check the budget first.", "Noted, moving on.",
              "{name}, you were going to look into that last time.", "That's a bigger change than it sounds.")


DOCUMENTS: dict[str, Callable[[str, int, random.Random], tuple[str, list[str], dict[str, str]]]] = {
    "newsletter": _newsletter,
    "codebase": _codebase,
    "dump": _dump,
    "transcript": _transcript,
}

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
_THREAD = (
    "Read the text above and wait for my questions. First: what is it about, in two sentences?",
    "What is the single most important detail in it?",
    "Quote the part that surprised you most.",
    "If you had to cut it in half, what would you keep?",
    "What questions does it leave unanswered?",
)


@cache
def question_splits() -> dict[str, str]:
    """Question families split per document kind, so every kind has held-out questions."""
    out: dict[str, str] = {}
    for doc, questions in QUESTIONS.items():
        out |= quota_splits([f"long/{doc}-{q.split('|')[0]}" for q in questions], "template")
    return out


def _item(split: str, tokens: int, rng: random.Random, thread: bool) -> Draft:
    doc = rng.choice(tuple(DOCUMENTS))
    text, topics, slots = DOCUMENTS[doc](split, tokens, rng)
    options = [q for q in QUESTIONS[doc] if question_splits()[f"long/{doc}-{q.split('|')[0]}"] == split]
    key, question = rng.choice(options).split("|", 1)
    question = question.format(**slots)
    family = f"long/{doc}-{key}"
    if thread:
        follow = rng.sample(_THREAD[1:], k=2)
        # the thread's generic follow-ups are fillers shared by all splits, like the modifiers
        turns = (f"{text}\n\n{_THREAD[0]}", question, *follow)
    else:
        turns = (f"{text}\n\n{question}",)
    return Draft("long", "+".join(topics), family, turns)


def long_drafts(split: str, count: int, tokens: tuple[int, int], seed: int, thread_share: float = 0.2) -> list[Draft]:
    """`count` long items for `split`, each of an estimated size drawn uniformly from `tokens` (min, max)."""
    rng = random.Random(f"{seed}:{split}:long")
    out: list[Draft] = []
    seen: set[str] = set()
    while len(out) < count:
        draft = _item(split, rng.randint(*tokens), rng, thread=rng.random() < thread_share)
        if draft.turns not in seen:
            seen.add(draft.turns)
            out.append(draft)
    return out


def long_prompts(n_tokens_target: int, count: int, seed: int, split: str = TEST) -> list[PromptItem]:
    """`count` long-context prompts of about `n_tokens_target` tokens each (see approx_tokens), built
    from the held-out families of `split` (test by default) so evaluation never sees train material."""
    if n_tokens_target < 64 or count < 1:
        raise UsageError(
            f"long_prompts needs n_tokens_target >= 64 and count >= 1 (got {n_tokens_target}, {count})",
            hint="ask for at least 64 tokens and one prompt",
        )
    if split not in (TRAIN, DEV, TEST):
        raise UsageError(f"unknown split {split!r} for long prompts", hint="use train, dev or test")
    # the last section overshoots by up to one section and the question adds ~20-40 tokens, so aim the
    # document a little under the target
    aim = max(32, int(n_tokens_target * 0.93) - 30)
    drafts = long_drafts(split, count, (aim, aim), seed)
    return [PromptItem(f"long-{split}-{n_tokens_target}-{i:04d}", d.category, d.turns) for i, d in enumerate(drafts)]
