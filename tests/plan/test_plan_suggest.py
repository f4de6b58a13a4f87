"""Advice about the draft: when it is what does not fit, and when no draft shape pays, the plan says
`--draft none` with the figures of the plan re-solved without it."""

from __future__ import annotations

import json
from dataclasses import replace

from homespec.cli import main
from homespec.plan.api import PlanRequest, make_plan
from homespec.plan.devices import HOST
from homespec.plan.fit import NO_FIT, solve
from homespec.plan.render import gib
from homespec.plan.suggest import DRAFT_ITEMS, advise


def _seventy_b_on_a_4090(ram_gib: float):
    """llama-3.1-70b Q4_K_M on one RTX 4090 with its assumed EAGLE-3.1 head, on a host whose cores are fixed
    at 8 (what a planned machine assumes at least), so the estimate is the same on every test machine."""
    p = make_plan(PlanRequest(model="llama-3.1-70b-q4", gpu="4090", ram=ram_gib))
    return advise(solve(p.model, p.draft, replace(p.machine, source="probe", cpu_cores=8), p.settings))


def test_a_plan_over_only_by_its_draft_says_draft_none_with_headroom_and_speed():
    plan = _seventy_b_on_a_4090(21)
    assert plan.verdict == NO_FIT and plan.estimate.pays is False
    bare = advise(solve(plan.model, None, plan.machine, plan.settings))
    assert bare.fits and bare.settings.n_gpu_layers > plan.settings.n_gpu_layers  # the head's GPU room takes layers
    want = (f"--draft none fits with {bare.offloaded_layers} of 80 layers offloaded (-ngl {bare.settings.n_gpu_layers}) "
            f"with {gib(bare.headroom_bytes)} to spare, {bare.estimate.plain_tokens_per_s:,.1f} tok/s without speculation")
    assert plan.suggestions[0] == want  # first: the draft would not pay either


def test_when_no_draft_tree_pays_a_note_says_no_draft_and_what_that_frees():
    plan = _seventy_b_on_a_4090(64)
    e = plan.estimate
    assert plan.fits and e.pays is False and e.faster_tree_tokens is None
    assert e.best_tree_tokens < plan.settings.tree_tokens and e.best_spec_tokens_per_s <= e.plain_tokens_per_s
    note = next(n for n in plan.notes if "no draft is the better choice" in n)
    for device, label in ((0, "gpu0"), (HOST, "host")):
        freed = sum(i.bytes for i in plan.items if i.kind in DRAFT_ITEMS and i.device == device)
        assert freed > 0 and f"{gib(freed)} on {label}" in note
    assert f"--draft-tokens {e.best_tree_tokens}, at {e.best_spec_tokens_per_s:,.1f} tok/s" in note
    bare = advise(solve(plan.model, None, plan.machine, plan.settings))
    assert f"-ngl {bare.settings.n_gpu_layers}) with {gib(bare.headroom_bytes)} to spare, " \
           f"{bare.estimate.plain_tokens_per_s:,.1f} tok/s" in note


def test_a_draft_that_pays_gets_no_draft_none_advice():
    plan = make_plan(PlanRequest(model="llama-3.1-8b-q4", gpu="4090"))
    assert plan.estimate.pays
    assert not any("--draft none" in n for n in (*plan.notes, *plan.suggestions))


def test_plan_json_carries_the_draft_none_suggestion(capsys):
    code = main(["plan", "--gpu", "4090", "--model", "llama-3.1-70b-q4", "--ram", "21", "--json"])
    p = json.loads(capsys.readouterr().out)
    assert code == 3 and p["verdict"] == "does_not_fit"
    assert any(s.startswith("--draft none fits with ") and s.endswith(" tok/s without speculation")
               for s in p["suggestions"])
    code = main(["plan", "--gpu", "4090", "--model", "llama-3.1-70b-q4", "--ram", "21", "--draft", "none", "--json"])
    assert code == 0 and json.loads(capsys.readouterr().out)["fits"]


def test_a_calibrated_plan_gives_calibrated_speeds_in_its_draft_advice(tmp_path):
    base = make_plan(PlanRequest(model="llama-3.1-70b-q4", gpu="4090", ram=21))
    plain = base.estimate.plain_tokens_per_s
    bench = tmp_path / "bench.json"  # a bench that measured half the estimated plain speed
    bench.write_text(json.dumps({"methods": {"none": {"tokens_per_s": plain / 2, "mean_accepted": 1.0}},
                                 "plan_estimate": {"plain_tokens_per_s": plain}}))
    cal = make_plan(PlanRequest(model="llama-3.1-70b-q4", gpu="4090", ram=21, calibrate=str(bench)))
    bare = make_plan(PlanRequest(model="llama-3.1-70b-q4", gpu="4090", ram=21, draft="none", calibrate=str(bench)))
    assert bare.estimate.plain_tokens_per_s < plain * 0.6
    assert any(s.startswith("--draft none fits") and s.endswith(f", {bare.estimate.plain_tokens_per_s:,.1f} tok/s "
                                                                 "without speculation") for s in cal.suggestions)
