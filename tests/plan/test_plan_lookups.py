"""homespec.plan.lookups: the plan's outlook for each drafter on a workload, from the lookups'
recorded acceptance (pure), and `homespec plan --workload`."""

from __future__ import annotations

import json

import pytest

from homespec.plan.lookups import (
    Bucket, buckets, lookup_outlook, outlook_line, pooled_alpha, read_record, workload_outlook,
)
from homespec.plan.speed import Estimate

T = {1: 0.010, 2: 0.013, 3: 0.016, 4: 0.019, 5: 0.022}


def _record(tried=(30, 27, 24), hits=(27, 24, 21), steps=100) -> dict:
    entry = {"steps": steps, "buckets": {"16": {"tried": list(tried), "hits": list(hits)}}}
    return {"model": "m", "workloads": {"code-edit": {"prompts": "edit-dev.jsonl", "sources": {"ngram": entry}},
                                        "chat": {"prompts": "dev.jsonl (chat)", "sources": {"ngram": {
                                            "steps": 100, "buckets": {"1": {"tried": [5], "hits": [1]}}}}}}}


def test_the_docstring_example():
    speedup, tau = lookup_outlook({4: Bucket(0.3, (0.9, 0.8, 0.7))}, lambda r: T[r])
    assert speedup == pytest.approx(1.72 / 0.0127 * 0.010)
    assert tau == pytest.approx(1.72)


def test_a_lookup_that_never_pays_is_plain_decoding():
    speedup, tau = lookup_outlook({1: Bucket(0.5, (0.1, 0.01))}, lambda r: T[r])
    assert (speedup, tau) == (pytest.approx(1.0), pytest.approx(1.0))
    assert lookup_outlook({}, lambda r: T[r]) == (pytest.approx(1.0), pytest.approx(1.0))


def test_the_record_reads_as_shares_and_acceptance_and_pools_for_the_guard():
    rec = _record()
    (b,) = buckets(rec, "code-edit", "ngram").values()
    assert b.share == pytest.approx(0.3) and b.alpha == pytest.approx((0.9, 24 / 27, 21 / 24))
    assert buckets(rec, "code-edit", "suffix") == {} and buckets({}, "chat", "ngram") == {}
    assert pooled_alpha(rec) == {("ngram", 16): pytest.approx((0.9, 24 / 27, 21 / 24))}  # chat's 5 drafts: too few
    assert set(read_record()) >= {"workloads"}  # the shipped record


def test_the_outlook_ranks_each_drafter_and_names_who_pays():
    e = Estimate(100.0, 60.0, 0.6, 1.5, 30.0, 5.0, 10.0, "b", rows_ms=tuple(T[r] * 1e3 for r in range(1, 6)))
    edit = workload_outlook(e, "eagle3", "code-edit", _record())
    assert [o.drafter for o in edit] == ["ngram", "eagle3"] and edit[0].speedup > 1.2
    assert "mostly with the prompt lookup" in outlook_line("code-edit", edit)
    chat = workload_outlook(e, "eagle3", "chat", _record())
    assert all(o.speedup <= 1.0 for o in chat)
    assert "no drafter is expected to pay" in outlook_line("chat", chat)


def test_plan_says_who_pays_for_a_workload(capsys):
    from homespec.cli import main

    assert main(["plan", "--gpu", "none", "--workload", "code-edit", "--json"]) == 0
    w = json.loads(capsys.readouterr().out)["workload"]
    assert w["name"] == "code-edit" and {d["drafter"] for d in w["drafters"]} >= {"ngram", "suffix"}
    assert main(["plan", "--gpu", "none", "--workload", "chat"]) == 0
    assert "workload chat:" in capsys.readouterr().out
    assert main(["plan", "--workload", "poetry"]) == 2
    assert "unknown workload" in capsys.readouterr().err
