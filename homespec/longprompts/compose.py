"""Long-context items: a composed document, code base, data dump or meeting transcript of a requested
size, followed by a question about it (or, for "thread" items, several questions as separate turns).

Sizes are estimated without a tokenizer: a prose word is ~1/0.75 tokens and a character ~1/4 token
(the usual rules of thumb for English with a BPE tokenizer); the larger of the two estimates counts,
so CSV dumps and code, which have few spaces, are not undercounted.
Every document is drawn only from the material of one split, so a test-split document shares no
subject, snippet, record kind or question family with train.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass

from homespec.errors import UsageError
from homespec.longprompts.material import TEST, LongSource, Subject, load_source
from homespec.longprompts.render import as_csv, as_markdown, draw_records, passage, render_snippet
from homespec.promptsets import PromptItem

WORDS_PER_TOKEN = 0.75
CHARS_PER_TOKEN = 4.0

Document = Callable[[LongSource, str, int, random.Random], tuple[str, list[str], dict[str, str]]]


@dataclass(frozen=True, slots=True)
class LongItem:
    """A long item before it gets an id: its turns plus the topic keys and the question family
    it came from (so the split can be checked)."""

    topics: tuple[str, ...]
    family: str  # "long/<document>-<question key>"
    turns: tuple[str, ...]


def approx_tokens(text: str) -> int:
    return int(max(len(text.split()) / WORDS_PER_TOKEN, len(text) / CHARS_PER_TOKEN))


def _newsletter(src: LongSource, split: str, tokens: int, rng: random.Random) -> tuple[str, list[str], dict[str, str]]:
    material = src.splits[split]
    subjects = list(material.subjects)
    rng.shuffle(subjects)
    parts = [f"# The {rng.choice(src.words.titles)} Round-up\n"]
    used: list[Subject] = []
    facts_by_name: dict[str, str] = {}
    while approx_tokens("\n".join(parts)) < tokens:
        if subjects:
            subject = subjects.pop()
            # a sentence is ~25 tokens: size the last sections to what is left of the budget
            left = tokens - approx_tokens("\n".join(parts))
            n_sentences = max(3, min(rng.randint(6, 12), left // 25 + 1))
            facts, text = passage(subject, rng, src.fillers, src.passages, n_sentences=n_sentences)
            parts.append(f"## {subject.name[0].upper() + subject.name[1:]}\n\n{text}\n")
            used.append(subject)
            facts_by_name[subject.name] = facts.founder
        elif rng.random() < 0.5:
            # once the split's subjects are used up, letters and listings keep the text varied
            letters = rng.sample(material.messages, k=min(3, len(material.messages)))
            parts.append("## Letters\n\n" + "\n\n".join(f"\"{m}\" ({rng.choice(src.fillers.names)})" for m in letters) + "\n")
        else:
            kind = rng.choice(material.records)
            rows = draw_records(kind, rng, rng.randint(6, 14), src.fillers)
            parts.append(f"## Listings: {kind.key.replace('-', ' ')}\n\n{as_markdown(kind, rows)}\n")
    focus = rng.choice(used)
    slots = {"focus": focus.name, "person": facts_by_name[focus.name], "n_sections": str(len(used))}
    return "\n".join(parts), [s.key for s in used], slots


_EXT = {"python": "py", "javascript": "js", "typescript": "ts", "go": "go", "rust": "rs", "c": "c",
        "java": "java", "sql": "sql", "bash": "sh"}


def _codebase(src: LongSource, split: str, tokens: int, rng: random.Random) -> tuple[str, list[str], dict[str, str]]:
    material = src.splits[split]
    snippets = list(material.snippets)
    parts, used = [], []
    buggy_index = rng.randrange(min(10, len(snippets)))
    i = 0
    while approx_tokens("\n".join(parts)) < tokens:
        if i >= len(snippets) and rng.random() < 0.6:
            # past the split's snippets, data fixtures keep a large code base from repeating itself
            kind = rng.choice(material.records)
            rows = draw_records(kind, rng, rng.randint(3, 8), src.fillers)
            parts.append(f"=== file: fixtures/{kind.key}_{len(parts)}.json ===\n{json.dumps(rows, indent=2)}\n")
            continue
        if i % len(snippets) == 0:
            rng.shuffle(snippets)
        snippet = snippets[i % len(snippets)]
        name = f"{snippet.key.split('-', 1)[1].replace('-', '_')}_{i}"
        code = render_snippet(snippet, rng, buggy=i == buggy_index)
        parts.append(f"=== file: src/{name}.{_EXT.get(snippet.lang, 'txt')} ===\n{code}\n")
        used.append(snippet)
        i += 1
    focus = rng.choice(used)
    return "\n".join(parts), sorted({"snippet:" + s.key for s in used}), {"focus": focus.purpose, "n_sections": str(i)}


def _dump(src: LongSource, split: str, tokens: int, rng: random.Random) -> tuple[str, list[str], dict[str, str]]:
    kind = rng.choice(src.splits[split].records)
    rows = draw_records(kind, rng, 5, src.fillers)
    while approx_tokens(as_csv(kind, rows)) < tokens:
        rows += draw_records(kind, rng, max(1, len(rows) // 4), src.fillers)
    n_rows = len(rows)
    focus = rng.choice(kind.numeric or tuple(f.name for f in kind.fields))
    return as_csv(kind, rows), ["records:" + kind.key], {"focus": focus, "n_sections": str(n_rows), "noun": kind.noun}


def _transcript_line(src: LongSource, split: str, rng: random.Random, people: list[str],
                     sentences: list[str]) -> tuple[str, str]:
    """One speaker and what they say: a message, a line of the passage, a check on a record, an
    action item or a reaction."""
    material = src.splits[split]
    speaker, other = rng.sample(people, 2)
    roll = rng.random()
    if roll < 0.25:
        said = rng.choice(material.messages)
    elif roll < 0.5:
        said = rng.choice(sentences)
    elif roll < 0.7:
        kind = rng.choice(material.records)
        row = draw_records(kind, rng, 1, src.fillers)[0]
        field = rng.choice(kind.fields).name
        said = f"Quick check on {kind.noun}: the {field.replace('_', ' ')} is {row[field]}, {other}, can you confirm?"
    elif roll < 0.85:
        said = f"Action for {other}: {rng.choice(material.goals)}, report back {rng.choice(src.words.when)}."
    else:
        said = rng.choice(src.words.reactions).format(name=other)
    return speaker, said


def _transcript(src: LongSource, split: str, tokens: int, rng: random.Random) -> tuple[str, list[str], dict[str, str]]:
    material = src.splits[split]
    people = rng.sample(src.fillers.names, rng.randint(3, 6))
    subject = rng.choice(material.subjects)
    _, text = passage(subject, rng, src.fillers, src.passages, n_sentences=12)
    sentences = [s.strip().rstrip(".") + "." for s in text.split(". ") if s.strip()]
    lines_out = [f"Meeting notes: {subject.name}. Present: {', '.join(people)}.", ""]
    minute = 0
    while approx_tokens("\n".join(lines_out)) < tokens:
        minute += rng.randint(1, 3)
        speaker, said = _transcript_line(src, split, rng, people, sentences)
        lines_out.append(f"[{minute // 60:02d}:{minute % 60:02d}] {speaker}: {said}")
    return "\n".join(lines_out), [subject.key], {
        "focus": subject.name, "person": rng.choice(people), "n_sections": str(len(lines_out))}


DOCUMENTS: dict[str, Document] = {
    "newsletter": _newsletter,
    "codebase": _codebase,
    "dump": _dump,
    "transcript": _transcript,
}


def _item(src: LongSource, split: str, tokens: int, rng: random.Random, thread: bool) -> LongItem:
    doc = rng.choice(tuple(DOCUMENTS))
    text, topics, slots = DOCUMENTS[doc](src, split, tokens, rng)
    key, question = rng.choice(src.splits[split].questions[doc])
    question = question.format(**slots)
    if thread:
        follow = rng.sample(src.words.thread[1:], k=2)
        # the thread's generic follow-ups are fillers shared by all splits, like the modifiers
        turns = (f"{text}\n\n{src.words.thread[0]}", question, *follow)
    else:
        turns = (f"{text}\n\n{question}",)
    return LongItem(tuple(topics), f"long/{doc}-{key}", turns)


def long_items(src: LongSource, split: str, count: int, tokens: tuple[int, int], seed: int,
               thread_share: float = 0.2) -> list[LongItem]:
    """`count` distinct long items for `split`, each of an estimated size drawn uniformly from
    `tokens` (min, max)."""
    rng = random.Random(f"{seed}:{split}:long")
    out: list[LongItem] = []
    seen: set[tuple[str, ...]] = set()
    while len(out) < count:
        item = _item(src, split, rng.randint(*tokens), rng, thread=rng.random() < thread_share)
        if item.turns not in seen:
            seen.add(item.turns)
            out.append(item)
    return out


def long_prompts(n_tokens_target: int, count: int, seed: int, split: str = TEST,
                 source: LongSource | None = None) -> list[PromptItem]:
    """`count` long-context prompts of about `n_tokens_target` tokens each (see approx_tokens), built
    from the held-out families of `split` (test by default) so evaluation never sees train material.
    `source` defaults to the shipped material."""
    if n_tokens_target < 64 or count < 1:
        raise UsageError(
            f"long_prompts needs n_tokens_target >= 64 and count >= 1 (got {n_tokens_target}, {count})",
            hint="ask for at least 64 tokens and one prompt",
        )
    src = load_source() if source is None else source
    if split not in src.splits:
        raise UsageError(f"unknown split {split!r} for long prompts", hint="use train, dev or test")
    # the last section overshoots by up to one section and the question adds ~20-40 tokens, so aim the
    # document a little under the target
    aim = max(32, int(n_tokens_target * 0.93) - 30)
    items = long_items(src, split, count, (aim, aim), seed)
    return [PromptItem(f"long-{split}-{n_tokens_target}-{i:04d}", "long", it.turns) for i, it in enumerate(items)]
