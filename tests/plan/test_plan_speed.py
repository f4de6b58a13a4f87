"""The speed estimate: tokens per target pass from acceptance per depth, and the roofline's costs."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from homespec.embedded import HEADS_DIR
from homespec.formats.acceptance import read_records
from homespec.plan.acceptance import acceptance_model, geometric
from homespec.plan.devices import devices_for
from homespec.plan.fit import solve
from homespec.plan.settings import Settings
from homespec.plan.speed import DeviceLoad, estimate, forward_seconds
from homespec.types import AcceptanceRecord
from homespec.plan.lines import LineKind
from test_plan_fit import f16_model, gpu, head_for, machine  # the hand-built specs

SHIPPED = HEADS_DIR / "smollm2-135m-instruct"


def shares(depth: int):
    """P(accepted >= d) for d = 1..depth: values in [0, 1], non-increasing in d."""
    return st.lists(st.floats(0.0, 1.0), min_size=depth, max_size=depth).map(lambda xs: tuple(sorted(xs, reverse=True)))


records = st.integers(1, 8).flatmap(lambda depth: st.builds(
    AcceptanceRecord, depth=st.just(depth), topk=st.sampled_from([1, 1, 4, 8, 10]),
    total=st.integers(2, 128), at_least=shares(depth), steps=st.just(10)))

HEAD = head_for(f16_model(n_layer=2, n_embd=512, n_head=8, n_head_kv=4, n_ff=1024, n_vocab=32000))
DRAFTS = [HEAD, replace(HEAD, expected_tau=2.7), replace(HEAD, acceptance=read_records(SHIPPED)),
          replace(HEAD, kind="model")]


@pytest.mark.parametrize("draft", DRAFTS, ids=["assumed", "calibrated", "recorded", "draft-model"])
@pytest.mark.parametrize("depth", [1, 4, 7, 12])
def test_a_one_node_tree_is_the_root_alone(draft, depth):
    assert acceptance_model(draft, 60, depth).tau(1, depth) == 1.0


@hsettings(max_examples=200, deadline=None)
@given(recs=st.lists(records, min_size=1, max_size=4), depth=st.integers(1, 10), budget=st.integers(1, 256))
def test_tau_never_decreases_with_the_tree_or_its_depth(recs, depth, budget):
    acc = acceptance_model(replace(HEAD, acceptance=tuple(recs)), budget, depth)
    taus = [acc.tau(t, depth) for t in range(1, 200)]
    assert taus[0] == 1.0
    assert all(b >= a - 1e-12 for a, b in zip(taus, taus[1:]))
    assert all(acc.tau(t, depth + 1) >= tau - 1e-12 for t, tau in zip(range(1, 200), taus))
    assert all(1.0 <= tau <= min(t, depth + 1) + 1e-9 for t, tau in zip(range(1, 200), taus))


@hsettings(max_examples=100, deadline=None)
@given(tau=st.floats(1.0, 6.0), depth=st.integers(1, 10), budget=st.integers(2, 256),
       kind=st.sampled_from(["eagle3", "eagle3.1", "model"]))
def test_tau_from_one_figure_is_monotone_and_reproduces_it(tau, depth, budget, kind):
    acc = acceptance_model(replace(HEAD, kind=kind, expected_tau=tau), budget, depth)
    taus = [acc.tau(t, depth) for t in range(1, 300)]
    assert all(b >= a - 1e-12 for a, b in zip(taus, taus[1:]))
    at = depth + 1 if kind == "model" else budget
    if at - 1 >= depth:
        assert acc.tau(at, depth) == pytest.approx(min(tau, depth + 1), abs=1e-6)


def test_geometric_shares_sum_to_tau():
    a = geometric(3.5, 7)
    assert 1 + sum(a) == pytest.approx(3.5, abs=1e-9)
    assert all(x > y for x, y in zip(a, a[1:])) and a[1] == pytest.approx(a[0] ** 2)


def test_the_shipped_heads_record_is_reproduced_at_its_shapes():
    recs = read_records(SHIPPED)
    acc = acceptance_model(replace(HEAD, acceptance=recs), 60, 7)
    for r in recs:
        assert acc.tau(r.total, r.depth) == pytest.approx(1 + sum(r.at_least), abs=1e-9)
    chain = next(r for r in recs if r.topk == 1)
    for d in range(1, chain.depth + 1):  # a shorter chain: the record's first d shares exactly
        assert acc.tau(d + 1, 7) == pytest.approx(1 + sum(chain.at_least[:d]))
    assert "acceptance.json" in acc.source


@hsettings(max_examples=60, deadline=None)
@given(n_gpus=st.integers(0, 1), tokens=st.integers(1, 512), more=st.integers(1, 512))
def test_verification_costs_more_for_a_bigger_tree(n_gpus, tokens, more):
    m = machine(*[gpu()] * n_gpus)
    loads = [DeviceLoad(d, 4 * 10**9, 2 * 8e9) for d in devices_for(m) if d.is_gpu or not n_gpus]
    assert forward_seconds(loads, tokens + more, 8) >= forward_seconds(loads, tokens, 8)


@pytest.mark.parametrize("nodes", [1, 2, 5, 8, 60, 200])
def test_the_estimate_describes_the_tree_the_plan_budgets(nodes):
    m = f16_model(bpw=0.5625)
    p = solve(m, head_for(m), machine(gpu()), Settings(n_ctx=4096, tree_tokens=nodes))
    e = p.estimate
    assert e.tree_tokens == nodes == p.settings.tree_tokens
    assert f"{nodes}-node tree" in e.basis and f"{nodes}-node tree" in next(i.detail for i in p.items if i.kind == LineKind.TREE_SCRATCH)
    if nodes == 1:
        assert e.expected_tau == 1.0 and e.speedup <= 1.0
    if e.faster_tree_tokens:
        assert e.faster_tree_tokens < nodes and e.faster_spec_tokens_per_s > e.spec_tokens_per_s
        assert any(f"--draft-tokens {e.faster_tree_tokens}" in n for n in p.notes)


def test_tau_and_verify_time_grow_with_the_budget():
    m = f16_model(bpw=0.5625)
    for mach in (machine(gpu()), machine()):
        prev = None
        for nodes in (1, 2, 3, 4, 5, 8, 16, 32, 60, 128):
            e = solve(m, head_for(m), mach, Settings(n_ctx=4096, tree_tokens=nodes)).estimate
            if prev is not None:
                assert e.expected_tau >= prev.expected_tau and e.verify_ms >= prev.verify_ms
            prev = e


def test_estimate_without_a_draft_is_plain_only():
    loads = [DeviceLoad(devices_for(machine(gpu()))[0], 10**9, 1e9)]
    e = estimate(loads, None, None, 0, 60, 7, 10, 8)
    assert e.spec_tokens_per_s is None and e.expected_tau is None and e.plain_tokens_per_s > 0
