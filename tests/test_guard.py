"""The guard on a real (tiny) target: plain decoding when the draft is always wrong, speculation
again when it recovers; greedy output never changes; the adaptive depth follows the cost model."""

from __future__ import annotations

import pytest
import torch

from homespec.speculative.drafters.base import DraftShape, ShapeLimits
from homespec.speculative.guard import Guard, _fit_line
from homespec.speculative.loop import Controller, Limits, Step, decode
from homespec.speculative.tree import DraftTree

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

    def begin(self, prompt, forward):
        pass

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
        return DraftTree(torch.tensor(toks), torch.arange(-1, n - 1), torch.ones(n))


class CountedCosts(Controller):
    """The guard over the real decode loop, shown step costs from a fixed cost model instead of
    wall-clock times, so what it decides cannot depend on how busy the machine is: a target pass
    costs 1 ms plus 0.1 ms per draft node verified, drafting 0.05 ms per draft level. A chain of
    6 then pays once about two of its tokens are accepted."""

    def __init__(self, guard: Guard):
        self.guard = guard

    def speculate(self) -> bool:
        return self.guard.speculate()

    def record(self, step: Step) -> None:
        import dataclasses

        t_verify = 1e-3 + 1e-4 * step.draft_size
        t_draft = 5e-5 * step.draft_size if step.speculative and step.draft_size else 0.0
        self.guard.record(dataclasses.replace(step, t_verify=t_verify, t_draft=t_draft, t_step=t_verify + t_draft))


def _plain(backend, prompt, n):
    backend.reset()
    return [t for s in decode(backend, None, prompt, limits=Limits(max_tokens=n, stop_at_eos=False)) for t in s.tokens]


def test_guard_falls_back_on_a_wrong_drafter_and_returns_when_it_recovers(target):
    prompt = target.tokenizer.encode("The quick brown fox jumps over the lazy dog. " * 3)
    n = 400
    plain = _plain(target, prompt, n)
    drafter = ScriptedDrafter(len(prompt), plain, wrong_calls=10)
    guard = Guard(drafter=drafter, window=6, backoff=8, plain_every=0)
    target.reset()
    steps = list(decode(target, drafter, prompt, limits=Limits(max_tokens=n, stop_at_eos=False),
                        controller=CountedCosts(guard)))
    out = [t for s in steps for t in s.tokens]
    assert out == plain  # whatever the guard decides, greedy output is the target's own
    spec = [s.speculative for s in steps[1:]]
    first_plain_after_spec = next(i for i in range(1, len(spec)) if spec[i - 1] and not spec[i])
    assert guard.stats.fallbacks >= 1 and first_plain_after_spec < 40  # the wrong drafter was switched off
    assert guard.stats.probes >= 1
    tail = steps[-20:]
    assert all(s.speculative for s in tail)  # ... and back on once the drafter is right
    assert sum(len(s.tokens) for s in tail) / len(tail) > 3


def test_guard_keeps_speculating_when_it_pays(target):
    prompt = target.tokenizer.encode("Once upon a time there was a robot. " * 3)
    plain = _plain(target, prompt, 200)
    drafter = ScriptedDrafter(len(prompt), plain, wrong_calls=0)
    guard = Guard(drafter=drafter, window=6)
    target.reset()
    steps = list(decode(target, drafter, prompt, limits=Limits(max_tokens=200, stop_at_eos=False),
                        controller=CountedCosts(guard)))
    assert guard.stats.fallbacks == 0
    assert [t for s in steps for t in s.tokens] == plain


def test_adaptive_depth_shrinks_when_deep_drafts_are_wasted(target):
    prompt = target.tokenizer.encode("Numbers: one two three four five six seven. " * 2)
    plain = _plain(target, prompt, 240)

    class TwoRight(ScriptedDrafter):
        def propose(self, root, context):  # right for 2 tokens, then wrong
            tree = super().propose(root, context)
            toks = tree.tokens.clone()
            toks[3:] = (toks[3:] + 101) % 40000
            return DraftTree(toks, tree.parents, tree.probs)

    drafter = TwoRight(len(prompt), plain, wrong_calls=0, depth=8)
    guard = Guard(drafter=drafter, adapt=True, max_depth=8, plain_every=0)
    target.reset()
    steps = list(decode(target, drafter, prompt, limits=Limits(max_tokens=240, stop_at_eos=False),
                        controller=CountedCosts(guard)))
    assert [t for s in steps for t in s.tokens] == plain
    assert drafter.depth < 8 and guard.stats.depth_changes >= 1
    j = guard.as_json()  # bench and generate JSON report what --adapt did
    assert j["depth_changes"] == guard.stats.depth_changes and j["depth"] == drafter.depth


def test_fit_line():
    a, b = _fit_line([(1, 2.0), (3, 4.0), (5, 6.0)])
    assert a == pytest.approx(1.0) and b == pytest.approx(1.0)
    assert _fit_line([(4, 2.0), (4, 4.0)]) == (3.0, 0.0)


def _step(tokens: int, seconds: float, speculative: bool):
    return Step(tuple(range(tokens)), tokens - 1, 4 if speculative else 0, 100, 0.0, seconds, seconds, speculative, None)


@pytest.mark.parametrize("spec_rate,judged_after", [(30.0, 2), (90.0, 4)], ids=["clear-loss", "narrow-loss"])
def test_a_clear_loss_is_called_sooner_than_a_narrow_one(spec_rate, judged_after):
    """Plain decoding at 100 tokens/s; speculation at 30 (a clear loss) is switched off after 2
    speculative steps, at 90 (inside the quick margin, outside the 3 % one) after 4."""
    guard = Guard(window=8)
    for _ in range(2):
        assert not guard.speculate()
        guard.record(_step(1, 0.01, False))
    for i in range(1, 6):
        assert guard.speculate()
        guard.record(_step(3, 3 / spec_rate, True))
        if guard.stats.fallbacks:
            break
    assert guard.stats.fallbacks == 1 and i == judged_after
    assert not guard.speculate()


# --- predicting before probing ----------------------------------------------------------------


def _fed_guard(costs, prior, **kw):
    """A guard that has measured plain decoding at 100 tokens/s (10 ms a step)."""
    guard = Guard(drafter=ScriptedDrafter(1, [], 0, depth=4), costs=costs, prior=prior, **kw)
    for _ in range(2):
        assert not guard.speculate()
        guard.record(_step(1, 0.01, False))
    return guard


def test_guard_skips_probes_it_predicts_to_lose_and_tries_those_that_can_pay():
    """Verifying a 5-node chain costs 4 plain steps (a CPU): with acceptance 0.5/0.25/0.1/0.05
    (1.9 tokens a step) speculation would run at ~0.45x plain, so the guard never drafts; the
    same head where the chain costs 1.1 plain steps (a GPU) is tried at once."""
    from homespec.speculative.costs import StepCosts

    prior = (0.5, 0.25, 0.1, 0.05)
    cpu = _fed_guard(StepCosts(plain_s=0.01, verify_s=0.04, draft_s=0.002, nodes=5, depth=4), prior, backoff=4)
    for _ in range(40):
        assert not cpu.speculate()
        cpu.record(_step(1, 0.01, False))
    assert cpu.stats.spec_steps == 0 and cpu.stats.skipped >= 2 and cpu.stats.probes == 0
    assert cpu.stats.predicted == pytest.approx(1.9 / 4.2, rel=1e-3)
    assert "skipped" in cpu.summary()

    gpu = _fed_guard(StepCosts(plain_s=0.01, verify_s=0.011, draft_s=0.002, nodes=5, depth=4), prior)
    assert gpu.speculate() and gpu.stats.skipped == 0
    assert gpu.stats.predicted == pytest.approx(1.9 / 1.3, rel=1e-3)


def test_a_skipped_probe_is_not_counted_as_a_probe():
    """Speculation lost (fallback), then at the end of the backoff the prediction says it would
    lose again: the guard skips the probe and counts it as skipped only."""
    from homespec.speculative.costs import StepCosts

    guard = _fed_guard(StepCosts(0.01, 0.04, 0.002, 5, 4), None, backoff=4)
    for _ in range(2):  # no prior yet: it tries, and two clearly losing steps switch it off
        assert guard.speculate()
        guard.record(_step(1, 0.05, True))
    assert guard.stats.fallbacks == 1
    guard.prior = (0.5, 0.25, 0.1, 0.05)  # from now on it can predict
    for _ in range(4):
        assert not guard.speculate()
        guard.record(_step(1, 0.01, False))
    assert not guard.speculate()  # the backoff is over, but the probe is predicted to lose
    assert guard.stats.skipped == 1 and guard.stats.probes == 0


def test_measured_wins_outrank_a_pessimistic_prediction():
    """A prior that predicts a loss does not stop speculation that was measured to win."""
    from homespec.speculative.costs import StepCosts

    guard = _fed_guard(StepCosts(0.01, 0.04, 0.002, 5, 4), (0.1,), plain_every=4)
    guard._spec_rate = 300.0  # measured earlier this session: 3x plain
    for _ in range(12):
        assert guard.speculate() or guard._plain_left  # plain only for the periodic plain sample
        guard.record(_step(3, 0.01, True) if not guard._plain_left else _step(1, 0.01, False))
    assert guard.stats.skipped == 0 and guard.stats.spec_steps >= 8


def test_guard_without_costs_or_prior_probes_as_before():
    guard = _fed_guard(None, None)
    assert guard.speculate() and guard.predicted_gain() is None


def test_step_costs_are_measured_on_the_real_loop(target):
    """measure_costs times plain and speculative steps of the real backend and drafter and leaves
    both reset; the ratios it yields are positive and the tree size is the drafter's."""
    from homespec.speculative.costs import measure_costs

    drafter = ScriptedDrafter(0, [], wrong_calls=10**6, depth=4)
    c = measure_costs(target, drafter, repeats=3)
    assert c.nodes == 5 and c.depth == 4
    assert c.plain_s > 0 and c.verify_s > 0 and c.verify_ratio > 0
    assert c.verify_ratio_at(1) == pytest.approx(1.0) and c.verify_ratio_at(5) == pytest.approx(c.verify_ratio)
    assert target.n_past == 0 and drafter.calls == 0  # reset afterwards


def test_recorded_prior_is_matched_to_the_draft_shape(tmp_path):
    from homespec.speculative.record import read_prior, write_record

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


def test_adapting_reshapes_any_drafter_through_its_protocol():
    """The guard sets the draft depth through set_shape(), so it reaches drafters whose knob has
    another name (prompt lookup's num_draft) and stays inside each drafter's limits()."""
    from homespec.speculative.drafters.ngram import NgramDrafter

    def feed(guard):
        for _ in range(2):  # the plain reference: 1 token in 10 ms
            guard.speculate()
            guard.record(Step((1,), 0, 0, 100, 0.0, 0.01, 0.01, False, None))
        for _ in range(8):  # 9-node drafts of which only the first token is ever right
            assert guard.speculate()
            n = guard.drafter.shape.total - 1
            guard.record(Step((1, 2), 1, n, 100, 0.0005 * n, 0.01 + 0.0004 * n, 0.011 + 0.0009 * n, True, None))

    ngram = NgramDrafter(num_draft=8)
    guard = Guard(drafter=ngram, adapt=True, plain_every=0)
    feed(guard)
    assert guard.stats.depth_changes >= 1 and ngram.num_draft == 1 == guard.as_json()["depth"]

    class Capped(ScriptedDrafter):
        def limits(self):
            return ShapeLimits(max_depth=3)

    capped = Capped(0, [], 0, depth=2)
    guard = Guard(drafter=capped, adapt=True, max_depth=8, plain_every=0)
    for _ in range(2):
        guard.speculate()
        guard.record(Step((1,), 0, 0, 100, 0.0, 0.01, 0.01, False, None))
    for _ in range(8):  # every draft fully accepted and nearly free: deeper always looks better
        assert guard.speculate()
        d = capped.depth
        guard.record(Step(tuple(range(d + 1)), d, d, 100, 0.0, 0.0101, 0.0102, True, None))
    assert capped.depth == 3 and guard.predicted_gain() is None
