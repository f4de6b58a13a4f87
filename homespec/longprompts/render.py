"""Text the long-context composer (and the prompt-set generator in tools/promptgen) builds documents
from: a passage about an invented subject, a code snippet with its identifiers drawn, invented
records and their CSV and markdown tables. Every name, year and number comes from the seeded rng."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from homespec.longprompts.material import Field, Fillers, PassageWords, RecordKind, Snippet, Subject


@dataclass(frozen=True, slots=True)
class Facts:
    """The seeded facts behind one passage, kept so questions can refer to them."""

    subject: Subject
    town: str
    founder: str
    other: str
    year: int
    n: int
    m: int
    pct: int


def draw_facts(subject: Subject, rng: random.Random, fillers: Fillers, words: PassageWords) -> Facts:
    p, q = rng.sample(fillers.names, 2)
    first, last = words.years[subject.kind]
    return Facts(subject, rng.choice(fillers.towns), p, q, rng.randint(first, last), rng.randint(40, 9000),
                 rng.randint(3, 60), rng.randint(5, 95))


def _slots(f: Facts, rng: random.Random, words: PassageWords, full_name: bool) -> dict[str, str]:
    # "Penny, a budgeting app" is introduced once; later sentences just say "Penny"
    s = f.subject.name if full_name else f.subject.name.split(",")[0]
    if full_name and "," in s:
        s += ","  # close the apposition: "Penny, a budgeting app, was launched"
    own = words.own_things.get(f.subject.key)
    thing = own if own is not None else rng.choice(words.things[f.subject.kind])
    return {
        "s": s,
        "S": s[0].upper() + s[1:],
        "y2": str(min(2024, f.year + rng.randint(1, 25))),
        "town": f.town,
        "p": f.founder,
        "q": f.other,
        "y": str(f.year),
        "n": f"{f.n:,}",
        "m": str(f.m),
        "m2": str(rng.randint(2, 30)),
        "pct": str(f.pct),
        "rating": f"{rng.randint(30, 49) / 10:.1f}",
        "thing": thing,
        "problem": rng.choice(words.problems),
        "plan": rng.choice(words.plans),
    }


def passage(subject: Subject, rng: random.Random, fillers: Fillers, words: PassageWords,
            n_sentences: int | None = None) -> tuple[Facts, str]:
    """A paragraph of 3-9 sentences about `subject`: the kind's opening sentence first, then a seeded mix."""
    facts = draw_facts(subject, rng, fillers, words)
    kind = words.sentences[subject.kind]
    rest = list(kind[1:] + words.common)
    rng.shuffle(rest)
    k = n_sentences if n_sentences is not None else rng.randint(3, 9)
    chosen = [kind[0]] + rest[: max(0, k - 1)]
    text = " ".join(sentence.format(**_slots(facts, rng, words, full_name=i == 0)) for i, sentence in enumerate(chosen))
    return facts, text


_BUG = re.compile(r"<<<(.*?)\|\|\|(.*?)>>>", re.S)
_SLOT = re.compile(r"@(\w+)@")


def render_snippet(snippet: Snippet, rng: random.Random, buggy: bool = False) -> str:
    chosen = {slot: rng.choice(options) for slot, options in snippet.names}
    code = _BUG.sub(lambda m: m.group(2) if buggy else m.group(1), snippet.code)
    return _SLOT.sub(lambda m: chosen[m.group(1)], code).strip("\n")


def _value(field: Field, rng: random.Random, fillers: Fillers) -> str:
    if field.kind == "person":
        return rng.choice(fillers.names) + " " + rng.choice(("A.", "B.", "K.", "M.", "O.", "S.", "T.", "V."))
    if field.kind == "town":
        return rng.choice(fillers.towns)
    if field.kind == "choice":
        return rng.choice(field.args)
    if field.kind == "int":
        return str(rng.randint(int(field.args[0]), int(field.args[1])))
    if field.kind == "money":
        return f"{rng.uniform(float(field.args[0]), float(field.args[1])):.2f}"
    if field.kind == "date":
        return f"{rng.randint(2019, 2025)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    if field.kind == "time":
        return f"{rng.randint(6, 22):02d}:{rng.choice(('00', '10', '15', '25', '30', '45', '50'))}"
    if field.kind == "code":
        pattern = field.args[0]
        return "".join(str(rng.randint(0, 9)) if ch == "#" else ch for ch in pattern)
    raise ValueError(f"unknown field kind {field.kind}")  # a typo in the record kinds, not user input


def draw_records(kind: RecordKind, rng: random.Random, n: int, fillers: Fillers) -> list[dict[str, str]]:
    return [{f.name: _value(f, rng, fillers) for f in kind.fields} for _ in range(n)]


def as_csv(kind: RecordKind, rows: list[dict[str, str]]) -> str:
    def cell(v: str) -> str:
        return f'"{v}"' if "," in v or " " in v else v

    header = ",".join(f.name for f in kind.fields)
    return "\n".join([header] + [",".join(cell(r[f.name]) for f in kind.fields) for r in rows])


def as_markdown(kind: RecordKind, rows: list[dict[str, str]]) -> str:
    names = [f.name for f in kind.fields]
    out = ["| " + " | ".join(names) + " |", "|" + "---|" * len(names)]
    out += ["| " + " | ".join(r[n] for n in names) + " |" for r in rows]
    return "\n".join(out)
