"""What long-context prompts are composed from, as typed data, and the reader of its shipped form.

tools/promptgen writes the material of every split (passage subjects, code snippets, record kinds,
messages, goals and the question families) and the fillers shared by all splits into
homespec/data/prompts/long_material.json; the composer draws from it at run time.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from homespec.errors import HomespecError

TRAIN, DEV, TEST = "train", "dev", "test"
MATERIAL_PATH = Path(__file__).resolve().parent.parent / "data" / "prompts" / "long_material.json"


@dataclass(frozen=True, slots=True)
class Subject:
    """An invented company, project, festival, ... that a passage is written about."""

    kind: str
    name: str

    @property
    def key(self) -> str:
        return f"subject:{self.kind}:{self.name}"


@dataclass(frozen=True, slots=True)
class Snippet:
    """A small code snippet: `@name@` is an identifier slot filled from `names`, and
    `<<<right|||wrong>>>` a spot where the fixed snippet has `right` and the buggy one `wrong`."""

    key: str
    lang: str
    purpose: str  # completes "a function that ..."
    code: str
    names: tuple[tuple[str, tuple[str, ...]], ...]


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    kind: str  # person | choice | int | money | date | time | code | town
    args: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RecordKind:
    """A kind of tabular record (orders, flights, sensor readings, ...)."""

    key: str
    noun: str  # one record is "an order", "a flight", ...
    fields: tuple[Field, ...]

    @property
    def numeric(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields if f.kind in ("int", "money"))

    @property
    def categorical(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields if f.kind in ("choice", "town"))


@dataclass(frozen=True, slots=True)
class Fillers:
    """People's names and towns: shared by every split, they vary the surface, not the task."""

    names: tuple[str, ...]
    towns: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PassageWords:
    """The sentences a passage is drawn from. Slots: {s} subject, {S} capitalised subject, {town},
    {p} {q} people, {y} {y2} years, {n} {m} {m2} numbers, {pct} percent, {thing} a detail of the
    subject's kind (`own_things` where each subject has its own), {problem}, {plan}, {rating}."""

    common: tuple[str, ...]
    sentences: Mapping[str, tuple[str, ...]]  # per kind; the first opens the passage
    things: Mapping[str, tuple[str, ...]]
    own_things: Mapping[str, str]  # subject key -> its detail
    problems: tuple[str, ...]
    plans: tuple[str, ...]
    years: Mapping[str, tuple[int, int]]  # first and last founding year per kind


@dataclass(frozen=True, slots=True)
class LongWords:
    """The composer's own fillers: newsletter titles, deadlines and reactions in transcripts, and
    the generic turns of "thread" items (the first asks to wait for questions)."""

    titles: tuple[str, ...]
    when: tuple[str, ...]
    reactions: tuple[str, ...]
    thread: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Material:
    """What documents of one split may be built from, as each source pool splits its own topics,
    and the question families of that split per document kind as (family key, question)."""

    subjects: tuple[Subject, ...]
    snippets: tuple[Snippet, ...]
    records: tuple[RecordKind, ...]
    messages: tuple[str, ...]
    goals: tuple[str, ...]
    questions: Mapping[str, tuple[tuple[str, str], ...]]


@dataclass(frozen=True, slots=True)
class LongSource:
    fillers: Fillers
    passages: PassageWords
    words: LongWords
    splits: Mapping[str, Material]


def _material(obj: dict) -> Material:
    return Material(
        subjects=tuple(Subject(s["kind"], s["name"]) for s in obj["subjects"]),
        snippets=tuple(
            Snippet(s["key"], s["lang"], s["purpose"], s["code"], tuple((k, tuple(v)) for k, v in s["names"]))
            for s in obj["snippets"]
        ),
        records=tuple(
            RecordKind(r["key"], r["noun"], tuple(Field(f["name"], f["kind"], tuple(f["args"])) for f in r["fields"]))
            for r in obj["records"]
        ),
        messages=tuple(obj["messages"]),
        goals=tuple(obj["goals"]),
        questions={doc: tuple((k, q) for k, q in qs) for doc, qs in obj["questions"].items()},
    )


def source_from_json(obj: dict) -> LongSource:
    """The inverse of dataclasses.asdict(source) after a JSON round trip (lists back to tuples)."""
    p = obj["passages"]
    return LongSource(
        fillers=Fillers(tuple(obj["fillers"]["names"]), tuple(obj["fillers"]["towns"])),
        passages=PassageWords(
            common=tuple(p["common"]),
            sentences={k: tuple(v) for k, v in p["sentences"].items()},
            things={k: tuple(v) for k, v in p["things"].items()},
            own_things=dict(p["own_things"]),
            problems=tuple(p["problems"]),
            plans=tuple(p["plans"]),
            years={k: (int(a), int(b)) for k, (a, b) in p["years"].items()},
        ),
        words=LongWords(**{k: tuple(v) for k, v in obj["words"].items()}),
        splits={split: _material(m) for split, m in obj["splits"].items()},
    )


@cache
def load_source(path: Path = MATERIAL_PATH) -> LongSource:
    """The shipped material (read once per process)."""
    try:
        obj = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise HomespecError(
            f"the packaged long-context material {path} is missing",
            hint="regenerate it with `python -m benchmarks build_prompts`",
        ) from None
    return source_from_json(obj)
