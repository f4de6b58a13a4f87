"""The GPU check's CPU side (scripts/gpu_check.sh, gpu_cost_curve.py, gpu_env.py, gpu_report.py):
the cost-curve code at a tiny shape on the CPU, its planner comparison against `homespec plan`,
the environment check, the report, and the shell script's usage errors. The whole procedure's
CPU rehearsal is `bash scripts/gpu_check.sh --dry-run` (minutes, and it downloads wheels)."""

from __future__ import annotations

import importlib.util
import io
import json
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"


def _script(name: str):
    spec = importlib.util.spec_from_file_location(f"gpu_check_{name}", SCRIPTS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def curve(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("curve") / "cost-curve.json"
    rc = _script("gpu_cost_curve").main(["--tiny", "--device", "cpu", "--context", "16", "--repeats", "1",
                                         "--warmup", "0", "--nodes", "1,4,8", "--json", str(out)])
    assert rc == 0
    return json.loads(out.read_text())


def test_cost_curve_covers_every_size_and_recorded_shape(curve):
    recorded = {(s["depth"], s["topk"], s["total"]) for s in curve["acceptance"]["shapes"]}
    assert recorded, "the shipped head records its acceptance"
    sizes = [r["nodes"] for r in curve["curve"]]
    # the requested sizes, plus every recorded shape's and the planner default's tree
    assert {1, 4, 8, 60} | {s[2] for s in recorded} <= set(sizes) and sizes == sorted(sizes)
    assert curve["ratios"]["1/1"] == 1.0 and set(curve["ratios"]) == {"1/1", "4/1", "8/1"}
    assert curve["tiny"] and curve["timer"] == "perf_counter" and curve["kernels"] == "torch"
    for r in curve["curve"]:
        assert r["verify_ms"]["median"] > 0 and r["commit_ms"]["n"] == 1
        assert r["depth"] <= 6 and (r["depth"] == 0) == (r["nodes"] == 1)
    drafted = {(d["depth"], d["topk"], d["total"]): d["nodes_drafted"] for d in curve["drafts"]}
    assert recorded | {(7, 10, 60)} == set(drafted) and all(n == k[2] for k, n in drafted.items())


def test_predicted_speedup_is_the_speed_model_on_measured_costs(curve):
    by_nodes = {r["nodes"]: r for r in curve["curve"]}
    plain = by_nodes[1]["verify_ms"]["median"] + by_nodes[1]["commit_ms"]["median"]
    for p in curve["predicted"]:
        row = by_nodes[p["total"]]
        verify = row["verify_ms"]["median"] + row["commit_ms"]["median"]
        draft = next(d["draft_ms"]["median"] for d in curve["drafts"]
                     if (d["depth"], d["topk"], d["total"]) == (p["depth"], p["topk"], p["total"]))
        assert p["speedup"] == pytest.approx(p["tau"] * plain / (verify + draft), rel=1e-3, abs=1e-4)  # the JSON rounds to 4 places


def test_planner_comparison_is_what_homespec_plan_prints(curve):
    from homespec.cli import main

    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = main(["plan", "--model", "llama-3.1-8b-bf16", "--gpu", "h200", "--backend", "torch", "--json"])
    assert rc == 0
    printed = json.loads(buf.getvalue())["estimate"]
    ours = curve["planner"]["default"]
    assert curve["planner"]["command"] == "homespec plan --model llama-3.1-8b-bf16 --gpu h200 --backend torch"
    assert printed["speedup"] == pytest.approx(ours["speedup"], abs=1e-3)
    assert printed["expected_tau"] == ours["expected_tau"]
    taus = [p["expected_tau"] for p in curve["planner"]["at_recorded_shapes"]]
    assert taus == pytest.approx([s["tau"] for s in curve["acceptance"]["shapes"]])  # the head's tau in the draft's place


def test_cost_curve_bad_arguments_are_one_line_errors(capsys):
    mod = _script("gpu_cost_curve")
    assert mod.main(["--tiny", "--device", "cpu", "--nodes", "1,x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --nodes") and "hint: " in err and "Traceback" not in err


def test_report_fills_the_results_block(curve, tmp_path):
    results = tmp_path / "out1"
    results.mkdir()
    (results / "cost-curve-8b.json").write_text(json.dumps(curve))
    (results / "summary-part1.json").write_text(json.dumps({
        "part": 1, "calls": 3, "dry_run": True, "seconds_since_call_1": 5,
        "steps": [{"step": "gpu", "status": "skipped", "seconds": 0, "note": "no GPU"}]}))
    doc = tmp_path / "gpu.md"
    doc.write_text("# page\n\nbefore\n<!-- gpu-results:begin -->\nold table\n<!-- gpu-results:end -->\nafter\n")
    assert _script("gpu_report").main([str(results), "--doc", str(doc)]) == 0
    page = doc.read_text()
    assert page.startswith("# page\n\nbefore\n<!-- gpu-results:begin -->\n") and page.endswith("<!-- gpu-results:end -->\nafter\n")
    assert "old table" not in page and "T=8/T=1" in page and "llama-3.1-8b-bf16 (tiny)" in page
    assert "| 1 | gpu | skipped | no GPU |" in page and "a dry run on the CPU" in page


def test_env_check_names_what_is_missing(tmp_path):
    mod = _script("gpu_env")
    names = {n for n, _, _ in mod.requirements()}
    assert {"typer", "gguf", "numpy", "torch", "pytest"} <= names
    missing = mod.probe_dist("homespec-no-such-dist", "1.0")
    assert missing["status"] == "missing" and missing["version"] is None
    problems = mod.report([missing], {"homespec-no-such-dist": True}, {"cuda_available": False, "version": "2"}, True)
    assert problems[0].startswith("homespec-no-such-dist>=1.0 is missing") and "torch sees no CUDA device" in problems[1]
    out = tmp_path / "env.json"
    assert mod.main(["--no-cuda", "--json", str(out)]) == 0  # this machine has every runtime dependency
    env = json.loads(out.read_text())
    assert env["problems"] == [] and {d["name"]: d["status"] for d in env["dists"]}["gguf"] == "ok"


@pytest.mark.parametrize("args, says", [
    ([], "prepare"),
    (["part"], "error: part needs a call number"),
    (["part", "7"], "error: no .gpu-carry/call7/MANIFEST"),
    (["part", "1", "--fast"], "error: unknown option '--fast' for part"),
    (["prepare", "--fast"], "error: unknown option '--fast' for prepare"),
    (["collect"], "error: collect needs the folders"),
    (["launch"], "error: unknown command 'launch'"),
])
def test_gpu_check_usage_errors(args, says):
    proc = subprocess.run(["bash", str(SCRIPTS / "gpu_check.sh"), *args], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "OUT": "/nonexistent", "HOME": "/tmp"})
    assert proc.returncode == 2 and says in proc.stderr
    assert proc.stderr.count("\n") <= 9 and "Traceback" not in proc.stderr


def test_gpu_check_is_valid_bash():
    assert subprocess.run(["bash", "-n", str(SCRIPTS / "gpu_check.sh")]).returncode == 0
