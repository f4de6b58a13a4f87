"""The GPU check's CPU side (scripts/gpu_check.sh, scripts/gpu_plan.py and its helpers in benchmarks/gpu/): the plan's arithmetic (what
each call carries, how many calls, the device seconds) on this tree, the 8B-shaped files' blocks and a tiny
twin that llama.cpp loads, the cost script, the report, the environment check and the script's usage
errors. The whole rehearsal, `bash scripts/gpu_check.sh --dry-run`, is the slow test at the end."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"
HELPERS = ROOT / "benchmarks" / "gpu"
MIB = 1 << 20


def _script(name: str, folder: Path = HELPERS):
    spec = importlib.util.spec_from_file_location(f"gpu_check_{name}", folder / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def plan_mod():
    return _script("gpu_plan", SCRIPTS)


@pytest.fixture(scope="module")
def shaped():
    return _script("shaped")


@pytest.fixture(scope="module")
def model_bytes() -> int:
    from homespec.embedded import smollm2_path

    return Path(smollm2_path()).stat().st_size


# --- the plan ----------------------------------------------------------------------------------


def test_the_plan_for_this_tree_fits_three_calls_and_the_budget(plan_mod, model_bytes):
    """What `prepare` and the dry run check first: this tree, the embedded model and call 1's files."""
    tree = plan_mod.tree_bytes()
    plan = plan_mod.make_plan(tree, model_bytes, plan_mod.fixed_sizes(None))
    assert plan.problems == [], plan.problems
    assert len(plan.calls) == 3 == plan_mod.MAX_CALLS
    assert [c.kind for c in plan.calls] == ["first", "middle", "last"]
    assert sum(c.slice_bytes for c in plan.calls) == model_bytes
    assert all(c.bytes_with(tree) <= plan_mod.LIMIT - plan_mod.MARGIN for c in plan.calls)
    assert set(plan.calls[0].carry) == {"llama-src.tar.xz", "wheels", "vocab.gguf"} and not plan.calls[1].carry
    assert plan.device_s <= plan_mod.BUDGET_S and plan.worst_s <= plan_mod.TASK_S
    assert "two calls carry" in plan.two_calls and "two calls would do" not in plan.two_calls


def test_two_calls_cannot_carry_the_model_beside_the_shipped_head(plan_mod, model_bytes):
    """Why three: the head travels in every call, so even a tree of nothing else leaves too little."""
    head = (ROOT / "homespec/data/heads/smollm2-135m-instruct/model.safetensors").stat().st_size
    fixed = sum(plan_mod.fixed_sizes(None).values())
    assert 2 * (plan_mod.LIMIT - head) < model_bytes + fixed
    assert 2 * (plan_mod.LIMIT - head) < int(model_bytes * 0.92) + fixed  # the model as .xz: 8 % smaller


def test_the_plan_fails_on_size_calls_or_time(plan_mod, model_bytes, tmp_path):
    fixed = plan_mod.fixed_sizes(None)
    big = plan_mod.make_plan(40 * MIB, model_bytes, fixed, results=tmp_path)
    assert any("calls are needed, more than 3" in p for p in big.problems)
    full = plan_mod.make_plan(63 * MIB, model_bytes, fixed, results=tmp_path)
    assert any("leave no room" in p for p in full.problems)
    slow = tmp_path / "2099-01-01-h100"
    slow.mkdir()
    (slow / "summary-part1.json").write_text(json.dumps({"procedure": 2, "part": 1, "kind": "first", "steps": [
        {"step": "compile", "status": "ok", "seconds": 600, "note": ""}]}))
    late = plan_mod.make_plan(26 * MIB, model_bytes, fixed, results=tmp_path)
    assert any("over the budget of 540" in p for p in late.problems)
    step = next(s for s in late.steps["first"] if s["name"] == "compile")
    assert step["seconds"] == 600 and "2099-01-01-h100" in step["source"]


def test_estimates_come_from_the_newest_measured_run_of_this_procedure(plan_mod, tmp_path):
    for name, doc in (("2030-01-01-h200", {"procedure": 2, "kind": "first"}),
                      ("2030-02-01-h100", {"procedure": 2, "kind": "first", "dry_run": True}),
                      ("2029-01-01-h200", {"procedure": 1, "kind": "first"})):
        (tmp_path / name).mkdir()
        steps = [{"step": "env", "status": "ok", "seconds": 7, "note": ""},
                 {"step": "cost-8b", "status": "failed (1)", "seconds": 99, "note": ""}]
        (tmp_path / name / "summary-part1.json").write_text(json.dumps({**doc, "part": 1, "steps": steps}))
    got, run = plan_mod.measured_steps(tmp_path)
    assert run == "2030-01-01-h200" and got == {("first", "env"): 7.0}  # a dry run, procedure 1 and failures ignored


def test_the_overlapping_steps_cost_only_what_the_compile_does_not_cover(plan_mod):
    Step = plan_mod.Step
    steps = [Step("a", 5, ""), Step("compile", 100, ""), Step("m", 30, "", overlaps="compile"),
             Step("t", 90, "", overlaps="compile"), Step("opt", 50, "", optional=True)]
    assert plan_mod.call_seconds(steps) == plan_mod.CALL_S[0] + 105 + 20


def test_prepare_writes_slices_that_join_to_the_model_and_a_manifest_the_calls_read(plan_mod, tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(np.random.default_rng(0).integers(0, 256, 3000, dtype=np.uint8).tobytes())
    stage = tmp_path / "carry" / "stage"
    (stage / "wheels").mkdir(parents=True)
    (stage / "wheels" / "x.whl").write_bytes(b"w" * 10)
    (stage / "vocab.gguf").write_bytes(b"v" * 20)
    calls = [plan_mod.Call(1, "first", {"wheels": 10, "vocab.gguf": 20}, 1000, 420),
             plan_mod.Call(2, "middle", {}, 1500, 60), plan_mod.Call(3, "last", {}, 500, 180)]
    plan = plan_mod.Plan(1, 3000, {"wheels": 10, "vocab.gguf": 20}, calls,
                         {k: [vars(s) for s in v] for k, v in plan_mod.STEPS.items()}, 500, 800, [], "")
    manifest = plan_mod.write_calls(plan, tmp_path / "carry", model, stage)
    joined = b"".join((tmp_path / "carry" / f"call{i}" / f"gguf.part{i}").read_bytes() for i in (1, 2, 3))
    assert joined == model.read_bytes() and manifest["gguf_sha256"] == plan_mod.sha256(model)
    assert (tmp_path / "carry/call1/wheels/x.whl").is_file() and (tmp_path / "carry/call1/vocab.gguf").is_file()
    env = plan_mod.shell_env(tmp_path / "carry/call3/MANIFEST.json", 3)
    values = dict(line.split("=", 1) for line in env.splitlines())
    assert values["calls"] == "3" and values["kind"] == "last" and values["timeout_s"] == "180"
    assert values["slice_sha256"] == plan_mod.sha256(tmp_path / "carry/call3/gguf.part3")
    assert values["est_bench_smollm2"] == "40" and "est_compile" not in values


# --- the 8B-shaped files --------------------------------------------------------------------------


def test_the_8b_shapes_are_the_catalogues_at_q4_k_m(shaped):
    spec = shaped.target_spec("8b")
    tensors = shaped.target_tensors(spec)
    types = {t.ggml_type for t in tensors}
    assert spec.n_layer == 32 and spec.n_embd == 4096 and spec.n_vocab == 128256 and types == {"Q4_K", "Q6_K", "F32"}
    size = sum(shaped.n_bytes(t) for t in tensors)
    assert 4.5 * 2**30 < size < 4.7 * 2**30  # Llama-3.1-8B Q4_K_M files are 4.58 GiB
    c = shaped.head_config("8b", spec)
    head = shaped.head_tensors(c)
    assert (c.hidden_size, c.intermediate_size, c.draft_vocab_size, c.vocab_size) == (4096, 14336, 32000, 128256)
    assert c.feature_layers(spec.n_layer) == (2, 16, 29)
    assert 440e6 < sum(shaped.n_bytes(t) for t in head) < 470e6  # ~425M weights in q8_0


@pytest.mark.parametrize("ggml_type", ["Q4_K", "Q6_K", "Q8_0", "Q4_1", "Q5_K"])
def test_random_blocks_are_finite_and_bounded(shaped, ggml_type):
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    raw = shaped.block_pattern(ggml_type, np.random.default_rng(0))
    w = dequantize(raw, GGMLQuantizationType[ggml_type])
    assert np.isfinite(w).all() and np.abs(w).max() <= 0.1 and w.std() > 0.005


@pytest.fixture(scope="module")
def tiny_models(shaped, tmp_path_factory):
    from homespec.embedded import smollm2_path

    d = tmp_path_factory.mktemp("shaped")
    shaped.write_vocab(str(smollm2_path()), d / "vocab.gguf")
    return shaped.make_models(str(d / "vocab.gguf"), d / "models", "tiny")


def test_the_tiny_twin_loads_and_decodes_in_llama_cpp(tiny_models):
    from homespec.backends.llamacpp.backend import LlamaCppBackend
    from homespec.backends.settings import BackendSettings
    from homespec.backends.llamacpp.head import LlamaCppHead, read_head_file

    b = LlamaCppBackend(tiny_models["target"], BackendSettings(n_ctx=256, n_threads=2))
    try:
        info = read_head_file(tiny_models["head"], b.n_vocab)
        assert b.n_vocab == 50176 and info.layers == (2, 2, 1) and info.draft_vocab.tolist() == list(range(4096))
        b.set_feature_layers(info.layers)
        f = b.prefill(list(range(100, 164)))
        assert np.isfinite(f.logits).all() and np.isfinite(f.features).all() and f.features.shape == (64, 768)
        head = LlamaCppHead(info, b, lanes=1, cells_per_lane=256, topk=4, n_threads=2)
        g = head.encode(f.features[:8])
        assert g.shape == (8, 256) and np.isfinite(g).all()
        head.close()
        assert "[PAD50175]" in b.tokenizer.decode([50175]) or b.tokenizer.decode([50175]) == ""
    finally:
        b.close()


def test_the_cost_script_measures_passes_and_drafts_without_torch(tiny_models, tmp_path):
    out = tmp_path / "cost.json"
    p = subprocess.run([sys.executable, str(HELPERS / "notorch.py"), str(HELPERS / "llama_cost.py"),
                        "--target", tiny_models["target"], "--head", tiny_models["head"], "--ctx", "32", "--nodes", "1,2,8",
                        "--depths", "2", "--repeats", "2", "--warmup", "0", "--threads", "1", "--json", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "torch imported: False" in p.stdout
    doc = json.loads(out.read_text())
    assert [r["nodes"] for r in doc["curve"]] == [1, 2, 8] and all(r["pass_ms"]["median"] > 0 for r in doc["curve"])
    assert [(d["depth"], d["topk"], d["total"]) for d in doc["drafts"]] == [(2, 1, 3), (2, 8, 17)]
    assert all(d["head_calls"] >= 2 and d["entries_written_per_draft"] >= 1 for d in doc["drafts"])


def test_notorch_runs_code_where_torch_cannot_be_imported():
    p = subprocess.run([sys.executable, str(HELPERS / "notorch.py"), "-"], input="import torch\n",
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "import of torch halted" in p.stderr


# --- the report ---------------------------------------------------------------------------------


def _envelope(suite: str, rows: list[dict], detail: dict) -> dict:
    """A results file as `python -m benchmarks SUITE --json FILE` writes it (benchmarks/results.py)."""
    return {"suite": suite, "date": "2026-12-06T00:00:00Z", "machine": {"cpu": "Xeon", "cores": 16, "gpu": ["H100"]},
            "command": ["python", "-m", "benchmarks", suite], "rows": rows, "ratios": {}, "detail": detail}


def _results(tmp_path: Path, dry: bool) -> Path:
    d = tmp_path / "out"
    d.mkdir()
    (d / "env.json").write_text(json.dumps({"python": "3.12.3", "cpus": 16, "torch": {"version": "2.11.0", "cuda_build": "13.0"},
                                            "nvidia_smi": {"gpus": [{"name": "NVIDIA H100 80GB HBM3", "driver_version": "580",
                                                                     "memory.total": "81559 MiB"}]}, "host": {"cpu_name": "Xeon"}}))
    curve = [{"nodes": n, "depth": min(6, n - 1), "pass_ms": {"median": 10.0 + n / 8}, "llama_decode_ms": {"median": 9.0}}
             for n in (1, 8, 48)]
    drafts = [{"depth": 6, "topk": 8, "total": 48, "draft_ms": {"median": 3.0}, "llama_process_ms": {"median": 2.0},
               "head_calls": 7}]
    (d / "cost-8b.json").write_text(json.dumps({"context": 1024, "repeats": 20, "accepted": 3, "device": {"flash_attn": True},
                                                "curve": curve, "drafts": drafts}))
    rounds = [{"shape": s, "step_ms": ms, "decode_ms": ms - 2, "host_ms": 1.0, "head_process_ms": 0.5, "draft_ms": 0.3, "round": 1}
              for s, ms in (("plain", 10.0), ("chain5", 12.0), ("tree48", 15.0))]
    (d / "host-8b.json").write_text(json.dumps(_envelope("host_step", rounds, {"steps": 48})))
    methods = {"homespec none": {"tokens_per_s": 400.0, "tokens_per_pass": 1.0, "identical_to_homespec_none": 1.0},
               "homespec eagle3 (forced, tree 6/8/48)": {"tokens_per_s": 600.0, "tokens_per_pass": 3.1,
                                                         "identical_to_homespec_none": 1.0},
               "server-eagle3 (failed)": {"error": "HomespecError: llama-server exited (1)"}}
    rows = [{"method": name, **r} for name, r in methods.items()]
    (d / "bench-smollm2.json").write_text(json.dumps(_envelope("llamacpp", rows, {"prompts": 8, "max_tokens": 128})))
    (d / "summary-part1.json").write_text(json.dumps({"procedure": 2, "part": 1, "calls": 3, "kind": "first", "dry_run": dry,
                                                      "seconds": 300, "steps": [{"step": "env", "status": "ok", "seconds": 9, "note": ""}]}))
    return d


def test_the_report_marks_measured_and_derived_figures_and_names_the_gpu(tmp_path):
    mod = _script("report")
    d = _results(tmp_path, dry=False)
    doc = tmp_path / "gpu.md"
    doc.write_text(f"# page\nbefore\n{mod.BEGIN}\nold\n{mod.END}\nafter\n")
    assert mod.main([str(d), "--doc", str(doc)]) == 0
    page = doc.read_text()
    assert page.startswith("# page\nbefore\n") and page.endswith(f"{mod.END}\nafter\n") and "old" not in page
    assert "**NVIDIA H100 80GB HBM3**" in page and "dry run" not in page
    assert page.count("(measured") >= 4 and "(derived" in page
    tau = json.loads(mod.SHIPPED.read_text())["shapes"][0]["tau"]
    assert f"x{tau * 10 / 15:.2f}" in page  # tau x t(plain) / t(tree48)
    assert f"x{6.13 * 10 / 15:.2f}" in page and "x1.50 |" in page  # the published tau; eagle3 over none
    assert "failed: HomespecError: llama-server exited (1)" in page
    assert "| 1 | env | ok | 9 | 11 |" in page
    assert mod.short_gpu("NVIDIA H100 80GB HBM3") == "h100" and mod.short_gpu("NVIDIA H200") == "h200"


def test_a_dry_runs_report_says_so(tmp_path):
    mod = _script("report")
    assert "A dry run on the CPU" in mod.render([_results(tmp_path, dry=True)])


# --- the environment and the script ------------------------------------------------------------------


def test_env_check_names_what_is_missing(tmp_path):
    mod = _script("env")
    names = {n for n, _, _ in mod.requirements()}
    assert {"typer", "gguf", "numpy", "torch", "pytest", "diskcache"} <= names and "llama-cpp-python" not in names
    missing = mod.probe_dist("homespec-no-such-dist", "1.0")
    assert missing["status"] == "missing" and missing["version"] is None
    problems = mod.report([missing], {"homespec-no-such-dist": True}, {"cuda_available": False, "version": "2"}, True)
    assert problems[0].startswith("homespec-no-such-dist>=1.0 is missing") and "torch sees no CUDA device" in problems[1]
    out = tmp_path / "env.json"
    assert mod.main(["--no-cuda", "--json", str(out)]) == 0  # this machine has every runtime dependency
    env = json.loads(out.read_text())
    assert env["problems"] == [] and {d["name"]: d["status"] for d in env["dists"]}["gguf"] == "ok"
    assert "error" in env["nvidia_smi"] or env["nvidia_smi"]["gpus"]


@pytest.mark.parametrize("args, says", [
    ([], "prepare"),
    (["part"], "error: part needs a call number"),
    (["part", "7"], "error: no .gpu-carry/call7/MANIFEST.json"),
    (["part", "1", "--fast"], "error: unknown option '--fast' for part"),
    (["prepare", "--fast"], "error: prepare takes no options"),
    (["collect"], "error: collect needs the folders"),
    (["launch"], "error: unknown command 'launch'"),
])
def test_gpu_check_usage_errors(args, says):
    proc = subprocess.run(["bash", str(SCRIPTS / "gpu_check.sh"), *args], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "OUT": "/nonexistent", "HOME": "/tmp"})
    assert proc.returncode == 2 and says in proc.stderr
    assert proc.stderr.count("\n") <= 10 and "Traceback" not in proc.stderr


def test_gpu_check_is_valid_bash():
    for script in ("gpu_check.sh", "lib/gpu_llama.sh"):
        assert subprocess.run(["bash", "-n", str(SCRIPTS / script)]).returncode == 0


@pytest.mark.slow
def test_the_dry_run_rehearses_every_call():
    """prepare, the three calls at tiny size on this CPU and the report (minutes; the first run also
    downloads the sdist and wheels, and compiles llama.cpp's CPU build once into the cache)."""
    p = subprocess.run(["bash", str(SCRIPTS / "gpu_check.sh"), "--dry-run"], capture_output=True, text=True,
                       timeout=3600, cwd=ROOT, env={**os.environ, "PYTHON": sys.executable})
    assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
    assert "every step passed" in p.stdout and "expected" in p.stdout
