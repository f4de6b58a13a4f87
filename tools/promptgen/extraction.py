"""Extraction and transformation: pull fields out of composed records and passages, convert formats."""

from __future__ import annotations

import random
from collections.abc import Callable

from tools.promptgen.design import Pool, Template
from tools.promptgen.passages import SUBJECTS, Subject, passage
from tools.promptgen.records import FORMAT_NAMES, FORMATS, RECORD_KINDS, RecordKind, draw_records, render


def _data(kind: RecordKind, rng: random.Random, fmt: str | None = None) -> tuple[str, str, list[dict[str, str]]]:
    fmt = fmt or rng.choice(FORMATS)
    rows = draw_records(kind, rng, rng.randint(3, 9))
    return fmt, render(kind, rows, fmt, rng), rows


def _to_json(kind: RecordKind, rng: random.Random) -> str:
    fmt, text, _ = _data(kind, rng)
    fields = rng.sample([f.name for f in kind.fields], k=min(len(kind.fields), rng.randint(2, 4)))
    return (f"Extract each {kind.noun.split(' ', 1)[1]} from the {FORMAT_NAMES[fmt]} below as a JSON array of "
            f"objects with the keys {', '.join(fields)}. Output only the JSON.\n\n{text}")


def _csv_to_json(kind: RecordKind, rng: random.Random) -> str:
    _, text, _ = _data(kind, rng, "csv")
    return f"Convert this CSV to JSON. Use numbers for numeric columns.\n\n{text}"


def _sorted_list(kind: RecordKind, rng: random.Random) -> str:
    fmt, text, _ = _data(kind, rng)
    key = rng.choice(kind.numeric or tuple(f.name for f in kind.fields))
    order = rng.choice(("ascending", "descending"))
    return f"Turn this {FORMAT_NAMES[fmt]} into a bulleted list sorted by {key}, {order}.\n\n{text}"


def _argmax(kind: RecordKind, rng: random.Random) -> str:
    fmt, text, _ = _data(kind, rng)
    key = rng.choice(kind.numeric or tuple(f.name for f in kind.fields))
    which = rng.choice(("highest", "lowest"))
    return f"Which {kind.noun.split(' ', 1)[1]} has the {which} {key}? Reply with that record as JSON.\n\n{text}"


def _column(kind: RecordKind, rng: random.Random) -> str:
    fmt, text, _ = _data(kind, rng)
    field = rng.choice(kind.fields).name
    return f"List only the {field} values from this {FORMAT_NAMES[fmt]}, comma-separated, in the original order.\n\n{text}"


def _md_to_csv(kind: RecordKind, rng: random.Random) -> str:
    _, text, _ = _data(kind, rng, "markdown")
    return f"Convert this markdown table to CSV.\n\n{text}"


def _group_count(kind: RecordKind, rng: random.Random) -> str:
    fmt, text, _ = _data(kind, rng)
    key = rng.choice(kind.categorical or tuple(f.name for f in kind.fields))
    return f"Group these records by {key} and count how many are in each group. Answer as a JSON object.\n\n{text}"


def _problems(kind: RecordKind, rng: random.Random) -> str:
    fmt = rng.choice(("csv", "markdown", "blocks"))
    rows = draw_records(kind, rng, rng.randint(4, 8))
    victim = rng.randrange(len(rows))
    field = rng.choice(kind.fields).name
    damage = rng.choice(("", "??", "N/A", "-1"))
    rows[victim] = {**rows[victim], field: damage}
    if rng.random() < 0.5:
        rows.append(dict(rows[0]))  # a duplicate row to spot
    return f"Check this data for problems such as missing values, duplicates or impossible entries, and list them.\n\n{render(kind, rows, fmt, rng)}"


def _yaml(kind: RecordKind, rng: random.Random) -> str:
    fmt, text, _ = _data(kind, rng)
    return f"Rewrite this {FORMAT_NAMES[fmt]} as YAML, one list item per record.\n\n{text}"


def _total(kind: RecordKind, rng: random.Random) -> str:
    fmt, text, _ = _data(kind, rng)
    key = rng.choice(kind.numeric or tuple(f.name for f in kind.fields))
    return f"What is the total and the average of {key} in the data below? Show the numbers you added.\n\n{text}"


def _sql_schema(kind: RecordKind, rng: random.Random) -> str:
    _, text, _ = _data(kind, rng, "csv")
    return f"Write a SQL CREATE TABLE statement that fits this data, and INSERT statements for the rows.\n\n{text}"


def _filter(kind: RecordKind, rng: random.Random) -> str:
    fmt, text, rows = _data(kind, rng)
    field = rng.choice(kind.fields).name
    value = rows[rng.randrange(len(rows))][field]
    return f"From the {FORMAT_NAMES[fmt]} below, return every record whose {field} is {value}, as JSON.\n\n{text}"


RECORD_TEMPLATES: dict[str, Callable[[RecordKind, random.Random], str]] = {
    "to-json": _to_json,
    "csv-to-json": _csv_to_json,
    "sorted-list": _sorted_list,
    "argmax": _argmax,
    "column": _column,
    "md-to-csv": _md_to_csv,
    "group-count": _group_count,
    "find-problems": _problems,
    "to-yaml": _yaml,
    "total": _total,
    "sql-schema": _sql_schema,
    "filter": _filter,
}

_PASSAGE = {
    "entities-json": "Extract every person, place and year mentioned in this text as JSON with the keys people, places and years.\n\n{text}",
    "numbers-table": "Make a table of every number in this passage and what it refers to.\n\n{text}",
    "timeline": "Pull out any dates or years from this passage and build a short timeline.\n\n{text}",
    "fact-card": "Fill in this card from the passage: Name / Location / Started / Key people / Key numbers.\n\n{text}",
    "questions-json": "Read the passage, then answer in JSON: who is mentioned, where it happens, and what the biggest number is.\n\n{text}",
    "claims": "List each factual claim in this passage as a separate line, without adding anything.\n\n{text}",
}


def _record(key: str, fn: Callable[[RecordKind, random.Random], str]) -> Template:
    return Template(key, fn)


def _passage(key: str, template: str) -> Template:
    def render_(subject: Subject, rng: random.Random) -> str:
        _, text = passage(subject, rng, n_sentences=rng.randint(4, 9))
        return template.format(text=text)

    return Template(key, render_)


POOLS = (
    Pool("extraction.records", "extraction", RECORD_KINDS, tuple(_record(k, f) for k, f in RECORD_TEMPLATES.items()),
         share=0.75, topic_key=lambda k: "records:" + k.key),
    Pool("extraction.passage", "extraction", SUBJECTS, tuple(_passage(k, t) for k, t in _PASSAGE.items()),
         share=0.25, topic_key=lambda s: s.key),
)
