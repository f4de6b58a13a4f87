"""benchmarks/: one runner, one set-up, one results format (docs/benchmarks.md)."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import harness, runner
from benchmarks.results import FIELDS

ROOT = Path(__file__).resolve().parent.parent
PY_SUITES = [name for name, path in runner.suites().items() if path.suffix == ".py"]
REQUIRED = {"first_token": ["--checkout", "here=."]}  # flags a suite cannot run without


def _run(*args: str, timeout: int = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchmarks", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout, env=env)


def test_the_listing_names_every_suite():
    p = _run()
    assert p.returncode == 0
    listed = {line.split()[0] for line in p.stdout.splitlines() if line.startswith("  ")}
    assert listed == set(runner.suites()) and {"host_step", "llamacpp", "plan_startup", "head"} <= listed


@pytest.mark.parametrize("suite", PY_SUITES)
def test_every_suite_takes_the_common_flags_and_its_own(suite):
    """A suite's parser builds with the runner's flags: no suite parses argv or names --json itself."""
    module = importlib.import_module(f"benchmarks.suites.{suite}")
    p = harness.parser(suite, module.__doc__)
    module.add_arguments(p)
    args = p.parse_args(REQUIRED.get(suite, []))
    assert args.json is None and args.no_json is False
    assert callable(module.run) and not hasattr(module, "main")


def test_an_unknown_suite_is_a_usage_error():
    p = _run("bench_nothing")
    assert p.returncode == 2
    assert p.stderr.splitlines()[0].startswith("error: no suite") and p.stderr.splitlines()[1].startswith("hint: ")


def test_a_run_writes_the_one_results_format(tmp_path):
    out = tmp_path / "startup.json"
    p = _run("plan_startup", "--repeat", "1", "--json", str(out))
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert tuple(doc) == FIELDS
    assert doc["suite"] == "plan_startup" and doc["command"][-4:] == ["--repeat", "1", "--json", str(out)]
    assert set(doc["machine"]) == {"cpu", "cores", "gpu"} and doc["machine"]["cores"] >= 1
    assert {r["arm"] for r in doc["rows"]} == {"python -c pass", "homespec plan"}
    assert doc["ratios"]["plan_over_python"] > 0


def test_a_suites_usage_error_is_one_line_and_a_hint():
    p = _run("eagle3_patch_parity", "--no-json")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.startswith("error: pass one of --save FILE or --compare FILE\nhint: ")


def test_alternate_reverses_the_order_every_other_round():
    seen: list[str] = []
    out = harness.alternate({"a": lambda: seen.append("a") or 1, "b": lambda: seen.append("b") or 2}, 3)
    assert seen == ["a", "b", "b", "a", "a", "b"] and out == {"a": [1, 1, 1], "b": [2, 2, 2]}


def test_scripts_keeps_set_up_the_tools_build_and_the_gpu_check():
    files = [p for p in (ROOT / "scripts").rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    assert len(files) <= 10, sorted(str(p.relative_to(ROOT)) for p in files)


@pytest.mark.slow
def test_host_step_measures_a_tiny_target_and_its_head_and_leaves_no_files(tmp_path):
    """`host_step --tiny`: a generated target and head, the head's own graph calls timed apart from the host
    work, the generated files gone after."""
    out = tmp_path / "host.json"
    p = _run("host_step", "--tiny", "--drafter", "head", "--shapes", "chain5,tree48", "--steps", "4", "--rounds", "1",
             "--json", str(out), timeout=300, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.startswith("tiny-F16.gguf, ") and "torch imported: False" in p.stdout
    doc = json.loads(out.read_text())
    assert doc["detail"]["tiny"] is True and doc["detail"]["drafter"] == "head"
    assert [(r["shape"], r["steps"]) for r in doc["rows"]] == [("chain5", 4), ("tree48", 4)]
    for row in doc["rows"]:
        assert row["head_process_ms"] > 0 and 0 < row["host_ms"] < row["step_ms"] and row["tokens_per_step"] >= 1
    assert [f.name for f in tmp_path.iterdir()] == ["host.json"]


@pytest.mark.parametrize("flags, error, hint", [
    (["--tiny", "--model", "x.gguf"], "--tiny makes its own target and head", "drop --model and --head, or --tiny"),
    (["--off-core"], "--off-core runs each graph call on one other core", "add --threads 1"),
])
def test_host_step_refuses_flags_that_do_not_go_together(flags, error, hint):
    p = _run("host_step", *flags, "--no-json")
    assert p.returncode == 2 and p.stderr == f"error: {error}\nhint: {hint}\n"
