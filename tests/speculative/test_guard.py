"""The engine's guard on a real (tiny) target, one lane: greedy output never changes whatever it
decides; with no guard every step drafts the drafter's full shape; the guard reshapes any drafter
through its protocol; a head's recorded acceptance is matched to the draft shape. The guard's
decisions on counted costs are tested in tests/speculative/test_speculative_guard.py."""

from __future__ import annotations

import pytest
import torch

from homespec.contracts.drafter import DraftShape, ShapeLimits
from homespec.contracts.tree import DraftTree
from homespec.speculative.guard import BatchGuard
from homespec.engine.run import decode
from homespec.speculative.steps import Limits

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    from tiny_models import make_tiny_gguf

    from homespec.backends.torch.backend import TorchBackend

    torch.set_num_threads(1)
    path = make_tiny_gguf(tmp_path_factory.mktemp("guard") / "t.gguf", n_layer=2, n_embd=64, n_ff=128, seed=3)
    backend = TorchBackend.load(str(path), max_context=1024)
    yield backend
    backend.close()


class ScriptedDrafter:
    """Proposes a chain: wrong tokens for the first `wrong_calls` proposals, then the target's own
    greedy continuation (an oracle read from a plain run)."""

    name = "scripted"

    def __init__(self, prompt_len: int, plain: list[int], wrong_calls: int, depth: int = 6):
        self.prompt_len, self.plain, self.wrong_calls, self.depth, self.total = prompt_len, plain, wrong_calls, depth, depth + 1
        self.calls = 0

    def begin(self, prompt, forward, *, kept=0):
        pass

    def trim(self, keep):
        return keep

    def reset(self):
        self.calls = 0

    def accept(self, tokens, features, next_token):
        pass

    @property
    def shape(self):
        return DraftShape(self.depth, 1, self.total)

    def limits(self):
        return ShapeLimits()

    def set_shape(self, depth, total):
        self.depth, self.total = depth, depth + 1  # a chain
        return self.shape

    def propose(self, root, context):
        self.calls += 1
        k = len(context) - self.prompt_len + 1  # index of root's successor in the plain output
        if self.calls <= self.wrong_calls:
            toks = [int(root)] + [(int(root) * 7 + 13 + i) % 40000 for i in range(self.depth)]
        else:
            toks = [int(root)] + self.plain[k: k + self.depth]
        n = len(toks)
        return DraftTree.of(toks, list(range(-1, n - 1)))


def _plain(backend, prompt, n):
    return [t for s in decode(backend, None, prompt, limits=Limits(max_tokens=n, stop_at_eos=False)) for t in s.tokens]


def _guard(drafter) -> BatchGuard:
    shape = drafter.shape
    return BatchGuard(depth=shape.depth, nodes_per_level=(shape.total - 1) / shape.depth)


def test_greedy_output_is_the_targets_whatever_the_guard_decides(target):
    prompt = target.tokenizer.encode("The quick brown fox jumps over the lazy dog. " * 3)
    n = 200
    plain = _plain(target, prompt, n)
    drafter = ScriptedDrafter(len(prompt), plain, wrong_calls=10)
    guard = _guard(drafter)
    steps = list(decode(target, drafter, prompt, limits=Limits(max_tokens=n, stop_at_eos=False), guard=guard))
    assert [t for s in steps for t in s.tokens] == plain
    j = guard.as_json()
    assert j["speculative_steps"] + j["plain_steps"] == len(steps) - 1  # every step after the prefill
    assert j["speculative_steps"] == sum(s.speculative for s in steps)


def test_without_a_guard_every_step_drafts_the_full_shape(target):
    prompt = target.tokenizer.encode("Once upon a time there was a robot. " * 3)
    plain = _plain(target, prompt, 120)
    drafter = ScriptedDrafter(len(prompt), plain, wrong_calls=0)
    steps = list(decode(target, drafter, prompt, limits=Limits(max_tokens=120, stop_at_eos=False)))
    assert [t for s in steps for t in s.tokens] == plain
    assert all(s.speculative and s.draft_size == 6 for s in steps[1:-1])
    assert sum(len(s.tokens) for s in steps[1:]) / len(steps[1:]) > 5  # the oracle's chains are kept


def test_a_forced_guard_drafts_at_full_depth_and_the_guard_reshapes_through_the_protocol(target):
    """The guard's depth reaches a drafter only through set_shape() (prompt lookup's knob is
    num_draft), clamped to the drafter's limits()."""
    from homespec.speculative.drafters.ngram import NgramDrafter

    prompt = target.tokenizer.encode("one two three four five six seven eight nine ten " * 4)
    ngram = NgramDrafter(num_draft=8)
    guard = BatchGuard(depth=8, forced=True)
    steps = list(decode(target, ngram, prompt, limits=Limits(max_tokens=40, stop_at_eos=False), guard=guard))
    assert [t for s in steps for t in s.tokens] == _plain(target, prompt, 40)
    assert ngram.num_draft == 8 and guard.chosen == 8

    class Capped(ScriptedDrafter):
        def limits(self):
            return ShapeLimits(max_depth=3)

    capped = Capped(len(prompt), [], wrong_calls=10**6, depth=3)
    guard = BatchGuard(depth=6, forced=True)  # asks for 6: the drafter's limits keep it at 3
    list(decode(target, capped, prompt, limits=Limits(max_tokens=8, stop_at_eos=False), guard=guard))
    assert capped.depth == 3


def test_recorded_prior_is_matched_to_the_draft_shape(tmp_path):
    from homespec.formats.acceptance import read_prior, write_record

    assert read_prior(tmp_path, 4, 1, 5) is None  # no record
    write_record(tmp_path, [{"depth": 6, "topk": 8, "total": 48, "tau": 2.0, "steps": 10, "at_least": [0.6, 0.3, 0.1]}],
                 split="dev")
    assert read_prior(tmp_path, 4, 1, 5) == (0.6, 0.3, 0.1)  # a chain may borrow a tree's record
    write_record(tmp_path, [{"depth": 6, "topk": 8, "total": 48, "tau": 2.0, "steps": 10, "at_least": [0.6, 0.3]},
                            {"depth": 4, "topk": 1, "total": 5, "tau": 1.5, "steps": 10, "at_least": [0.4, 0.1]}])
    assert read_prior(tmp_path, 4, 1, 5) == (0.4, 0.1)
    assert read_prior(tmp_path, 6, 8, 48) == (0.6, 0.3)
    write_record(tmp_path, [{"depth": 4, "topk": 1, "total": 5, "tau": 1.5, "steps": 10, "at_least": [0.4, 0.1]}])
    assert read_prior(tmp_path, 6, 8, 48) is None  # a tree never borrows a chain's (lower) record
    (tmp_path / "acceptance.json").write_text("{not json")
    assert read_prior(tmp_path, 4, 1, 5) is None
