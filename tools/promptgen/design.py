"""The combinatorial design: pools of topics x task templates, the family split, and balanced sampling.

A pool pairs hand-written topics with templates that know how to phrase a task about them. Every
generated prompt records which topic and which template family it came from, so the split can be
made by family: a test prompt's topic and template never appear in train (docs/prompts.md).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

TRAIN, DEV, TEST = "train", "dev", "test"
# Shares of each family list held out. 15 % of topics and of templates for test means test prompts
# come from ~2 % of the topic x template space, and none of it is reachable from train.
TEST_SHARE = 0.15
DEV_SHARE = 0.10
_SALT = "homespec-prompts-v1"  # changing it reshuffles every family between splits

Render = Callable[[Any, random.Random], "str | tuple[str, ...] | Rendered"]
Modifier = Callable[[str, random.Random], str]


@dataclass(frozen=True, slots=True)
class Draft:
    """A generated prompt before it gets an id: its text plus the families it came from."""

    category: str
    topic: str  # topic key, e.g. "concept:how tides work"
    template: str  # template family, e.g. "chat.concept/eli5"; "a+b" when a prompt used two
    turns: tuple[str, ...]

    @property
    def template_families(self) -> tuple[str, ...]:
        return tuple(self.template.split("+"))


@dataclass(frozen=True, slots=True)
class Rendered:
    """What a template returns when the prompt also used another pool's template (a multi-turn
    opening): the turns plus those further template families."""

    turns: tuple[str, ...]
    also: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Template:
    key: str
    render: Render


@dataclass(frozen=True)
class Pool:
    """Topics x templates for one kind of task. `topic_key` names a topic globally: the same passage
    subject used by two pools lands in the same split in both."""

    name: str
    category: str
    topics: tuple[Any, ...]
    templates: tuple[Template, ...]
    share: float  # fraction of the category's quota drawn from this pool
    topic_key: Callable[[Any], str] = str
    modifiers: tuple[Modifier, ...] = field(default_factory=tuple)
    modifier_rate: float = 0.0
    # Template families are named "<family>/<key>"; pools that phrase the same tasks over different
    # material share a family so a task held out in one is held out in all.
    family: str = ""
    # Pools whose topics belong to another pool (multi-turn builds on single-turn topics) take the
    # split from there instead of splitting their own list.
    topic_split: Callable[[Any], str] | None = None


def _unit(key: str) -> float:
    """A stable number in [0, 1) for a key: the same on every machine and Python (unlike hash())."""
    digest = hashlib.sha256(f"{_SALT}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def quota_splits(keys: Sequence[str], kind: str) -> dict[str, str]:
    """Split a family list by quota: order by a stable hash, first 15 % test, next 10 % dev, the rest
    train, at least one family in each held-out split. Quotas (rather than a hash threshold) keep
    even a 7-item list from leaving a split empty; two pools that share a topic list split it alike."""
    ordered = sorted(keys, key=lambda k: _unit(f"{kind}:{k}"))
    n_test = max(1, round(len(ordered) * TEST_SHARE))
    n_dev = max(1, round(len(ordered) * DEV_SHARE))
    out = {}
    for i, key in enumerate(ordered):
        out[key] = TEST if i < n_test else DEV if i < n_test + n_dev else TRAIN
    return out


def qualified_topic(pool: Pool, topic: Any) -> str:
    return pool.topic_key(topic)


def qualified_template(pool: Pool, template: Template) -> str:
    return f"{pool.family or pool.name}/{template.key}"


def topic_splits(pool: Pool) -> dict[str, str]:
    keys = [qualified_topic(pool, t) for t in pool.topics]
    if pool.topic_split is not None:
        return {qualified_topic(pool, t): pool.topic_split(t) for t in pool.topics}
    return quota_splits(keys, "topic")


def template_splits(pool: Pool) -> dict[str, str]:
    return quota_splits([qualified_template(pool, t) for t in pool.templates], "template")


def families(pool: Pool, split: str) -> tuple[list[Any], list[Template]]:
    """The topics and templates of `pool` that belong to `split`."""
    tsplit = template_splits(pool)
    psplit = topic_splits(pool)
    topics = [t for t in pool.topics if psplit[qualified_topic(pool, t)] == split]
    templates = [t for t in pool.templates if tsplit[qualified_template(pool, t)] == split]
    return topics, templates


def sample_pool(pool: Pool, split: str, n: int, seed: int, seen: set[str]) -> list[Draft]:
    """Up to `n` distinct prompts from the split's families of `pool`.

    Topics are dealt like cards (every topic once before any repeats) so that volume spreads over the
    whole topic list instead of piling onto a few; templates are drawn at random per topic.
    """
    topics, templates = families(pool, split)
    if not topics or not templates or n <= 0:
        return []
    rng = random.Random(f"{seed}:{split}:{pool.name}")
    out: list[Draft] = []
    deck: list[Any] = []
    attempts = 0
    while len(out) < n and attempts < n * 12:
        attempts += 1
        if not deck:
            deck = list(topics)
            rng.shuffle(deck)
        topic = deck.pop()
        template = rng.choice(templates)
        rendered = template.render(topic, rng)
        also: tuple[str, ...] = ()
        if isinstance(rendered, Rendered):
            rendered, also = rendered.turns, rendered.also
        turns = (rendered,) if isinstance(rendered, str) else tuple(rendered)
        if pool.modifiers and rng.random() < pool.modifier_rate:
            modifier = rng.choice(pool.modifiers)
            turns = (modifier(turns[0], rng),) + turns[1:]
        text_key = "\x1e".join(turns)
        if text_key in seen:
            continue
        seen.add(text_key)
        family = "+".join((qualified_template(pool, template),) + also)
        out.append(Draft(pool.category, qualified_topic(pool, topic), family, turns))
    return out


def lines(block: str) -> tuple[str, ...]:
    """Hand-written lists are kept as one item per line in a triple-quoted string."""
    return tuple(s.strip() for s in block.strip().splitlines() if s.strip() and not s.strip().startswith("#"))


def fill(template: str, rng: random.Random, **slots: Sequence[str] | str) -> str:
    """format() with each slot either a fixed string or a list to draw one entry from."""
    values = {k: (v if isinstance(v, str) else rng.choice(v)) for k, v in slots.items()}
    return template.format(**values)

