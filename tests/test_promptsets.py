"""homespec's own prompt sets: sizes, the family split, determinism, no benchmark text, the file reader,
and the split between the generator (tools/promptgen, build time) and what the runtime reads."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from homespec.errors import HomespecError, UsageError
from homespec.longprompts import approx_tokens, long_prompts
from homespec.longprompts.material import MATERIAL_PATH, load_source
from homespec.promptsets import DATA_DIR, PromptItem, load_prompts, read_prompts_file, read_text, split_path
from tools.promptgen import edits
from tools.promptgen.build import (
    CATEGORY_POOLS,
    DEFAULT_SEED,
    EDIT_FILES,
    EDIT_PER_KIND,
    all_pools,
    build_edit,
    build_long_sample,
    build_split,
    check_family_consistency,
)
from tools.promptgen.design import families
from tools.promptgen.jsonl import item_to_json
from tools.promptgen.long import long_drafts, source, source_json

CATEGORIES = set(CATEGORY_POOLS)

# Opening lines of well-known public benchmark prompts (MT-bench, HumanEval, GSM8K, Alpaca-eval,
# vicuna-bench, MBPP), written from memory. None of them may appear in homespec's own sets.
DENYLIST = (
    "def has_close_elements",
    "def separate_paren_groups",
    "def truncate_number",
    "def below_zero",
    "from typing import List",
    "Natalia sold clips",
    "Weng earns $12 an hour",
    "Betty is saving money for a new wallet",
    "Janet's ducks lay 16 eggs",
    "Compose an engaging travel blog post about a recent trip to Hawaii",
    "Draft a professional email seeking your supervisor's feedback",
    "Imagine you are writing a blog post comparing two popular smartphone",
    "Write a persuasive email to convince your introverted friend",
    "Describe a vivid and unique character",
    "Pretend yourself to be Elon Musk",
    "Embrace the role of Sheldon",
    "How can I improve my time management skills?",
    "What are the most effective ways to deal with stress?",
    "Write a function to find the shared elements from the given two lists",
    "Give three tips for staying healthy",
    "What are the names of some famous actors that started their careers on Broadway",
)


@pytest.fixture(scope="module")
def packaged() -> dict[str, list[PromptItem]]:
    return {split: load_prompts(split) for split in ("train", "dev", "test", "long")}


@pytest.fixture(scope="module")
def built():
    return {split: build_split(split, DEFAULT_SEED) for split in ("train", "dev", "test")}


def _texts(items) -> set[str]:
    return {t for item in items for t in item.turns}


def test_split_sizes_and_categories(packaged):
    assert len(packaged["train"]) >= 20_000
    assert len(packaged["dev"]) >= 400
    assert len(packaged["test"]) >= 400
    for split in ("train", "dev", "test"):
        counts = Counter(item.category for item in packaged[split])
        assert CATEGORIES <= set(counts), split
        assert min(counts[c] for c in CATEGORIES) >= (1000 if split == "train" else 50), counts
        assert len({item.id for item in packaged[split]}) == len(packaged[split])
    assert Counter(i.category for i in packaged["train"])["long"] >= 300
    assert {item.category for item in packaged["long"]} == {"long"}


def test_multi_turn_items_have_two_or_three_user_turns(packaged):
    multi = [item for item in packaged["train"] if item.category == "multiturn"]
    assert multi and all(2 <= len(item.turns) <= 3 for item in multi)
    assert {len(item.turns) for item in multi} == {2, 3}
    assert all(len(item.turns) == 1 for item in packaged["train"] if item.category not in ("multiturn", "long"))


def test_prompts_are_distinct_and_no_text_is_shared_between_splits(packaged):
    for split in ("train", "dev", "test"):
        keys = ["\x1e".join(item.turns) for item in packaged[split]]
        assert len(set(keys)) == len(keys), split
    train = _texts(packaged["train"])
    # follow-up turns ("Can you make that shorter?") are phrasings, not prompts: compare the openings
    openings = {item.turns[0] for item in packaged["train"]}
    for split in ("dev", "test", "long"):
        assert not openings & {item.turns[0] for item in packaged[split]}, split
    assert not {t for t in _texts(packaged["test"]) if len(t) > 80} & train


@pytest.mark.slow
def test_test_families_never_appear_in_train(built):
    def fams(split):
        topics = {t for d in built[split].drafts for t in d.topic.split("+")}
        templates = {t for d in built[split].drafts for t in d.template_families}
        return topics, templates

    train_topics, train_templates = fams("train")
    for split in ("dev", "test"):
        topics, templates = fams(split)
        assert topics and templates
        assert not topics & train_topics, split
        assert not templates & train_templates, split
    dev_topics, dev_templates = fams("dev")
    test_topics, test_templates = fams("test")
    assert not dev_topics & test_topics and not dev_templates & test_templates


def test_every_pool_has_held_out_families_and_shared_families_agree():
    check_family_consistency(all_pools())
    for pool in all_pools():
        for split in ("train", "dev", "test"):
            topics, templates = families(pool, split)
            assert topics and templates, (pool.name, split)


@pytest.mark.slow
def test_packaged_files_equal_a_fresh_build(built, packaged):
    """Same seed -> byte-identical files: the committed JSONL is exactly what the generator makes now."""
    for split in ("train", "dev", "test"):
        fresh = "".join(item_to_json(i) + "\n" for i in built[split].items)
        assert fresh == read_text(split_path(split)), split
    fresh_long = "".join(item_to_json(i) + "\n" for i in build_long_sample(DEFAULT_SEED))
    assert fresh_long == (DATA_DIR / "long.jsonl").read_text(encoding="utf-8")
    assert source_json() == MATERIAL_PATH.read_bytes()


def test_shipped_long_material_reads_back_as_generated():
    """bench --long composes from the shipped material: it must be exactly what the generator holds,
    so the runtime's long prompts are the generator's (and long.jsonl's) long prompts."""
    assert MATERIAL_PATH.parent == DATA_DIR
    assert load_source() == source()


def test_the_runtime_reads_prompts_without_the_generator(tmp_path):
    """The installed package carries the data, not the generator: the reader, the long-context
    composer and the CLI work in an interpreter where tools/ cannot be imported."""
    mine = tmp_path / "mine.jsonl"
    mine.write_text('{"prompt": "Hello"}\n', encoding="utf-8")
    code = (
        "import sys; sys.modules['tools'] = None\n"  # any import of tools.* now fails
        "import homespec.cli\n"
        "from homespec.promptsets import load_prompts, read_prompts_file\n"
        "from homespec.longprompts import long_prompts\n"
        "assert len(load_prompts('dev')) == 525 and read_prompts_file(sys.argv[1])[0].prompt == 'Hello'\n"
        "print(long_prompts(2048, 2, seed=2048)[1].id)\n"
    )
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-c", code, str(mine)], cwd=tmp_path, capture_output=True, text=True,
                         env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "long-test-2048-0001"


def test_generation_is_deterministic_and_seeded():
    a = build_split("dev", seed=11).items
    b = build_split("dev", seed=11).items
    c = build_split("dev", seed=12).items
    assert [item_to_json(i) for i in a] == [item_to_json(i) for i in b]
    assert {i.turns for i in a} != {i.turns for i in c}


def test_the_edit_sets_are_a_fresh_build_with_every_kind_held_out():
    """edit.jsonl (test families) and edit-dev.jsonl (dev families): every kind, each prompt asking
    for a given text back changed; their material and phrasings never in train, nor shared."""
    for split, name in EDIT_FILES.items():
        fresh = build_edit(split, DEFAULT_SEED)
        assert "".join(item_to_json(i) + "\n" for i in fresh) == (DATA_DIR / name).read_text(encoding="utf-8")
        assert Counter(i.category for i in fresh) == {k: EDIT_PER_KIND for k in edits.KINDS}
        assert all(("```" in i.prompt) == (i.category != "rewrite") for i in fresh)
    assert [i.id for i in load_prompts("edit")] == [i.id for i in build_edit("test")]
    for pool in edits.POOLS:
        held = {split: families(pool, split) for split in ("train", "dev", "test")}
        assert all(topics and templates for topics, templates in held.values()), pool.name
        keys = {split: {t.key for t in templates} for split, (_, templates) in held.items()}
        assert not keys["test"] & keys["train"] and not keys["dev"] & (keys["train"] | keys["test"])
    assert not {i.prompt for i in load_prompts("edit")} & {i.prompt for i in load_prompts("edit-dev")}


def test_no_public_benchmark_text(packaged):
    for split, items in {**packaged, "edit": load_prompts("edit"), "edit-dev": load_prompts("edit-dev")}.items():
        for item in items:
            for turn in item.turns:
                lowered = turn.lower()
                for phrase in DENYLIST:
                    assert phrase.lower() not in lowered, (split, item.id, phrase)


@pytest.mark.parametrize("tokens", [256, 1024, 4096])
def test_long_prompts_reach_the_requested_size(tokens):
    items = long_prompts(tokens, count=4, seed=3)
    assert len(items) == 4 and len({i.turns for i in items}) == 4
    for item in items:
        size = approx_tokens("\n".join(item.turns))
        assert 0.85 * tokens <= size <= 1.3 * tokens, (item.id, size)
        assert item.category == "long"
    assert [i.turns for i in long_prompts(tokens, 4, seed=3)] == [i.turns for i in items]


def test_long_prompts_use_only_their_split_families():
    train = long_drafts("train", 40, (400, 1200), seed=1)
    test = long_drafts("test", 40, (400, 1200), seed=1)
    train_topics = {t for d in train for t in d.topic.split("+")}
    test_topics = {t for d in test for t in d.topic.split("+")}
    assert not train_topics & test_topics
    assert not {f for d in train for f in d.template_families} & {f for d in test for f in d.template_families}


def test_long_prompts_reject_absurd_requests():
    with pytest.raises(UsageError):
        long_prompts(10, 1, seed=0)
    with pytest.raises(UsageError):
        long_prompts(1024, 1, seed=0, split="holdout")


def test_load_prompts_rejects_unknown_split():
    with pytest.raises(UsageError, match="unknown prompt split"):
        load_prompts("validation")


def test_read_prompts_file_accepts_prompt_and_turns(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text(
        json.dumps({"prompt": "Hello there"}) + "\n\n"
        + json.dumps({"id": "x", "category": "chat", "turns": ["Hi", "And then?"]}) + "\n",
        encoding="utf-8",
    )
    items = read_prompts_file(path)
    assert items == [
        PromptItem("mine-1", "user", ("Hello there",)),
        PromptItem("x", "chat", ("Hi", "And then?")),
    ]
    assert items[1].is_multi_turn and items[0].prompt == "Hello there"


@pytest.mark.parametrize(
    "bad, why",
    [
        ("{not json", "not valid JSON"),
        ('["a list"]', "not a JSON object"),
        ('{"text": "no prompt key"}', "neither"),
        ('{"prompt": 3}', '"prompt" must be'),
        ('{"prompt": "   "}', '"prompt" must be'),
        ('{"turns": []}', '"turns" must be'),
        ('{"turns": ["ok", 5]}', '"turns" must be'),
    ],
)
def test_read_prompts_file_names_the_bad_line(tmp_path, bad, why):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "fine"}\n' + bad + "\n", encoding="utf-8")
    with pytest.raises(HomespecError) as info:
        read_prompts_file(path)
    assert f"{path}:2:" in info.value.message and why in info.value.message
    assert "prompt" in info.value.hint


def test_read_prompts_file_missing_or_empty(tmp_path):
    with pytest.raises(HomespecError, match="does not exist"):
        read_prompts_file(tmp_path / "nope.jsonl")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n", encoding="utf-8")
    with pytest.raises(HomespecError, match="no prompts"):
        read_prompts_file(empty)


def test_read_prompts_file_reads_xz_and_names_a_damaged_one(tmp_path):
    """A `.jsonl.xz` reads as its JSONL (the packaged train set is stored so); damaged xz is one error."""
    import lzma

    packed = tmp_path / "mine.jsonl.xz"
    packed.write_bytes(lzma.compress(json.dumps({"prompt": "Hello there"}).encode() + b"\n"))
    assert read_prompts_file(packed) == [PromptItem("mine-1", "user", ("Hello there",))]
    damaged = tmp_path / "bad.jsonl.xz"
    damaged.write_bytes(b"not xz at all")
    with pytest.raises(HomespecError, match="not valid xz data") as info:
        read_prompts_file(damaged)
    assert "xz" in info.value.hint


def test_the_train_set_is_stored_compressed():
    assert split_path("train").name == "train.jsonl.xz" and split_path("train").is_file()
    assert not (DATA_DIR / "train.jsonl").exists() and split_path("dev").name == "dev.jsonl"
