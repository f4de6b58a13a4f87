"""`homespec plan` and `homespec probe` end to end, through the real entry point."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from homespec.cli import main


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_json_schema_and_sums(capsys):
    code, out, _ = run(capsys, "plan", "--gpu", "4090", "--model", "llama-3.1-8b-q4", "--json")
    assert code == 0
    p = json.loads(out)
    assert p["verdict"] == "fits"
    assert isinstance(p["total_bytes"], int) and isinstance(p["headroom_bytes"], int)
    assert p["total_bytes"] == sum(i["bytes"] for i in p["items"])
    assert all({"name", "device", "bytes"} <= set(i) for i in p["items"])
    names = {i["name"] for i in p["items"]}
    assert {"weights", "draft weights", "target KV", "draft KV", "compute", "tree scratch", "reserve"} <= names
    assert p["estimate"]["spec_tokens_per_s"] > 0 and "estimate" in p["estimate"]["basis"]


def test_plan_that_does_not_fit_exits_3_and_suggests(capsys):
    code, out, _ = run(capsys, "plan", "--gpu", "3060", "--model", "llama-3.1-405b-q4", "--ram", "32", "--json")
    assert code == 3
    p = json.loads(out)
    assert p["verdict"] == "does_not_fit" and p["headroom_bytes"] < 0


def test_plan_offload_reports_layers_and_ram(capsys):
    code, out, _ = run(capsys, "plan", "--gpu", "4090", "--model", "llama-3.1-70b-q4", "--ram", "128", "--ctx", "8192",
                       "--json")
    assert code == 0
    p = json.loads(out)
    assert p["verdict"] == "fits_offloaded"
    assert 0 < p["offloaded_layers"] < 80
    assert any("entirely on GPUs" in s for s in p["suggestions"])  # e.g. two more 4090s
    assert any(re.search(r"keeps \d+ more layers? on the GPU", s) for s in p["suggestions"])  # a q8_0 KV cache


def test_plan_table_renders(capsys):
    code, out, _ = run(capsys, "plan", "--gpu", "4090,3090", "--model", "llama-3.1-70b-q4", "--ctx", "4096")
    assert code in (0, 3)
    assert "draft KV" in out and "target KV" in out and "estimated decode" in out


def test_plan_default_model_is_the_embedded_smollm2(capsys):
    code, out, _ = run(capsys, "plan", "--gpu", "none", "--json")
    assert code == 0
    p = json.loads(out)
    assert p["model"]["format"] == "gguf" and p["model"]["n_layer"] == 30


@pytest.mark.parametrize(
    "args",
    [
        ["--model", "llama-9.9-1b"],
        ["--ctx", "-5"],
        ["--ctx", "999999999999"],
        ["--gpu", "4091"],
        ["--model", "/nonexistent/model.gguf"],
        ["--kv-type", "q9"],
        ["--emit", "ollama"],
        ["--ctx", "abc"],  # the parser's own errors too (no boxed usage screen)
        ["--bogus"],
        ["--ctx"],
    ],
)
def test_bad_input_is_one_line_error_with_hint(capsys, args):
    code, out, err = run(capsys, "plan", "--gpu", "4090", *args)
    assert code == 2
    lines = [l for l in err.splitlines() if l.strip()]
    assert len(lines) == 2, err
    assert lines[0].startswith("error: ") and lines[1].startswith("hint: ")
    assert "Traceback" not in err and out == ""
    if args in (["--ctx"], ["--bogus"]):  # a missing value at the end of the line too names the subcommand
        assert lines[1] == "hint: see `homespec plan --help`", err


@pytest.mark.parametrize(("args", "command"), [(["draft", "train", "--tokens"], "homespec draft train"),
                                               (["draft", "--bogus"], "homespec draft"), (["--bogus"], "homespec")])
def test_parser_error_hint_names_the_command_on_the_line(capsys, args, command):
    code, out, err = run(capsys, *args)
    assert code == 2 and err.splitlines()[-1] == f"hint: see `{command} --help`", err


def test_bare_command_prints_help_not_an_error(capsys):
    code, out, err = run(capsys)
    assert code == 2 and "Usage:" in out + err and "plan" in out + err and "error:" not in out + err


@pytest.mark.parametrize("command", [[], ["probe"], ["plan"], ["generate"], ["bench"], ["chat"], ["draft"],
                                     ["draft", "train"]])
def test_dash_h_is_help_for_every_command(capsys, command):
    code, out, err = run(capsys, *command, "-h")
    assert code == 0, err
    assert f"Usage: homespec {' '.join(command)}".rstrip() in " ".join(out.split())
    assert "-h" in out and "--help" in out


@pytest.mark.parametrize("command", [["generate", "-p", "hi"], ["bench", "--methods", "none,draft"], ["chat"]])
@pytest.mark.parametrize("threads", ["0", "-2"])
def test_threads_below_one_is_a_usage_error_before_loading(capsys, command, threads):
    code, out, err = run(capsys, *command, "--threads", threads)
    assert code == 2 and err.strip().startswith(f"error: --threads {threads} is outside [1, ") and "hint: " in err


def test_corrupt_gguf_is_an_error_not_a_traceback(capsys, tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 64)
    code, _, err = run(capsys, "plan", "--gpu", "4090", "--model", str(bad))
    assert code in (1, 2)
    assert err.startswith("error: ") and "hint: " in err and "Traceback" not in err


def test_emit_llama_server_and_vllm(capsys):
    code, out, _ = run(capsys, "plan", "--gpu", "4090", "--model", "llama-3.1-8b-q4", "--emit", "llama-server")
    assert code == 0
    *comments, command = out.strip().splitlines()  # what the command still needs, then the command
    assert all(c.startswith("# ") for c in comments)
    assert command.startswith("llama-server ") and "-ngl 33" in command and "--spec-type draft-eagle3" in command
    code, out, _ = run(capsys, "plan", "--gpu", "4090,4090", "--model", "llama-3.1-8b-q4", "--emit", "vllm")
    assert '"method":"eagle3"' in out and "--tensor-parallel-size 2" in out


def test_plan_and_probe_import_neither_torch_nor_llama_cpp():
    code = (
        "import sys; from homespec.cli import main; "
        "rc = main(['plan', '--gpu', '4090', '--model', 'llama-3.1-70b-q4', '--json']); "
        "rc2 = main(['probe', '--json']); "
        "bad = [m for m in ('torch', 'llama_cpp', 'transformers', 'huggingface_hub') if m in sys.modules]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-500:] + r.stderr[-500:]


def test_importing_the_cli_loads_no_heavy_library():
    """Every command module is imported with the package; each keeps its heavy imports inside the command."""
    code = ("import sys, homespec.cli; "
            "print([m for m in ('torch', 'llama_cpp', 'numpy', 'transformers', 'fastapi', 'uvicorn', 'prometheus_client', 'huggingface_hub') "
            "if m in sys.modules])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout[-500:] + r.stderr[-500:]


def test_help_lists_the_commands_in_their_order():
    """The command modules register in the order `homespec --help` shows them, draft's group last."""
    import typer

    from homespec.cli import app

    root = typer.main.get_command(app)
    assert list(root.list_commands(None)) == ["probe", "plan", "generate", "bench", "chat", "serve", "models", "pull", "draft"]
    assert list(root.commands["draft"].list_commands(None)) == ["train", "export"]


def test_probe_json_on_a_cpu_machine(capsys):
    code, out, _ = run(capsys, "probe", "--json")
    assert code == 0
    m = json.loads(out)
    assert m["ram_bytes"] > 0 and isinstance(m["gpus"], list)


def test_calibrate_applies_measured_speed_memory_and_acceptance(capsys, tmp_path):
    code, out, _ = run(capsys, "plan", "--gpu", "none", "--json")
    base = json.loads(out)
    bench = {
        "methods": {
            "none": {"tokens_per_s": base["estimate"]["plain_tokens_per_s"] / 2, "mean_accepted": 1.0,
                     "memory": {"planned": {"total_bytes": 1000}, "measured": {"total_bytes": 1100}}},
            "eagle3": {"tokens_per_s": 1.0, "mean_accepted": 2.5},
        },
        "plan_estimate": {"plain_tokens_per_s": base["estimate"]["plain_tokens_per_s"]},
    }
    f = tmp_path / "bench.json"
    f.write_text(json.dumps(bench))
    code, out, _ = run(capsys, "plan", "--gpu", "none", "--json", "--calibrate", str(f))
    assert code == 0
    cal = json.loads(out)
    assert cal["estimate"]["plain_tokens_per_s"] == pytest.approx(base["estimate"]["plain_tokens_per_s"] / 2, rel=0.02)
    assert cal["estimate"]["expected_tau"] <= 2.5
    extra = sum(i["bytes"] for i in cal["items"] if i["name"] == "calibration")
    assert extra == pytest.approx(0.1 * base["total_bytes"], rel=0.01)
    (tmp_path / "bad.json").write_text("{}")
    code, _, err = run(capsys, "plan", "--gpu", "none", "--calibrate", str(tmp_path / "bad.json"))
    assert code == 2 and err.startswith("error: ")


def test_calibrate_takes_acceptance_from_speculative_steps_only(tmp_path):
    """With the guard, plain steps dilute mean_accepted toward 1; spec_tau is the head's figure,
    and a method that never speculated gives no acceptance at all."""
    from homespec.plan.calibrate import load_calibration

    def cal(eagle3: dict, ngram: dict | None = None) -> float | None:
        methods = {"none": {"tokens_per_s": 80.0, "mean_accepted": 1.0}, "eagle3": eagle3}
        if ngram:
            methods["ngram"] = ngram
        f = tmp_path / "b.json"
        f.write_text(json.dumps({"methods": methods, "plan_estimate": {"plain_tokens_per_s": 80.0}}))
        return load_calibration(str(f)).tau

    assert cal({"mean_accepted": 1.2, "spec_tau": 2.4}) == 2.4
    assert cal({"mean_accepted": 1.0, "spec_tau": None}, {"mean_accepted": 1.5, "spec_tau": 2.9}) == 2.9
    assert cal({"mean_accepted": 1.0, "spec_tau": None}) is None
    assert cal({"mean_accepted": 2.5}) == 2.5  # a file written before spec_tau existed


def _headroom_cells(out: str) -> list[float]:
    row = next(l for l in out.splitlines() if "headroom" in l)
    return [float(x.replace(",", "")) for x in re.findall(r"(-?[\d,]+\.\d+) GiB", row)]


@pytest.mark.parametrize("args", [
    ["--gpu", "m3-ultra-512", "--model", "llama-3.1-405b-f16"],  # over the Mac's one pool
    ["--gpu", "m3-ultra-512", "--model", "llama-3.1-405b-q8"],  # GPU's share full, the rest on the CPU side
    ["--gpu", "m2-max-32", "--model", "llama-3.1-70b-q4"],
    ["--gpu", "m3-ultra-96", "--model", "llama-3.1-8b-q4"],
    ["--gpu", "4090", "--model", "llama-3.1-70b-q4", "--ram", "64"],
    ["--gpu", "3060", "--model", "llama-3.1-405b-q4", "--ram", "32"],
])
def test_verdict_headroom_and_table_agree(capsys, args):
    code, out, _ = run(capsys, "plan", *args, "--json")
    p = json.loads(out)
    assert p["fits"] == (p["headroom_bytes"] >= 0) == (code == 0)
    assert p["total_bytes"] == sum(i["bytes"] for i in p["items"]) == sum(d["used_bytes"] for d in p["devices"])
    assert "over" not in p["message"] or not re.search(r"-\d", p["message"])  # "over" is never negative
    if p["unified_memory"]:
        gpu0, host = p["devices"]
        assert host["shared_bytes"] == gpu0["used_bytes"]
        if p["fits"]:
            assert gpu0["used_bytes"] + host["used_bytes"] <= host["capacity_bytes"]
    code, out, _ = run(capsys, "plan", *args)
    cells = _headroom_cells(out)
    assert cells and (min(cells) >= 0) == p["fits"]
    verdict = next(l for l in out.splitlines() if l.startswith(("fits", "does not fit")))
    assert verdict.startswith("fits") == p["fits"] and not re.search(r"-\d", verdict)


def test_a_mac_over_its_unified_memory_says_so(capsys):
    code, out, _ = run(capsys, "plan", "--gpu", "m3-ultra-512", "--model", "llama-3.1-405b-f16", "--json")
    p = json.loads(out)
    assert code == 3 and not p["fits"] and p["headroom_bytes"] < 0
    host = p["devices"][-1]
    assert -p["headroom_bytes"] == host["used_bytes"] + host["shared_bytes"] - host["capacity_bytes"]
    assert p["message"].startswith("does not fit: ") and "unified memory" in p["message"]
    assert not any("more Apple" in s for s in p["suggestions"])  # a Mac takes no second chip


@pytest.mark.parametrize("gpu,model,gpu_cap_gib", [
    ("strix-halo", "qwen3-30b-a3b-q4", 64.0),  # amdgpu's GTT default: half of the 128 GiB
    ("dgx-spark", "gpt-oss-120b", None),  # the pool: ggml-cuda gives an integrated GPU MemAvailable
])
def test_unified_machines_beyond_apple_plan_as_one_pool(capsys, gpu, model, gpu_cap_gib):
    code, out, _ = run(capsys, "plan", "--gpu", gpu, "--model", model, "--json")
    p = json.loads(out)
    gpu0, host = p["devices"]
    assert code == 0 and p["verdict"] == "fits" and p["unified_memory"]
    assert host["capacity_bytes"] == 128 * 2**30 - int(128 * 2**30 * 0.10)  # RAM less the OS's, whatever this host has
    assert gpu0["capacity_bytes"] == (host["capacity_bytes"] if gpu_cap_gib is None else int(gpu_cap_gib * 2**30))
    assert host["shared_bytes"] == gpu0["used_bytes"]
    assert not any("more " in s for s in p["suggestions"])  # one chip per machine


def test_strix_halo_over_its_gtt_limit_names_the_setting(capsys):
    code, out, _ = run(capsys, "plan", "--gpu", "strix-halo", "--model", "qwen3-235b-a22b-q2_k", "--draft", "none")
    assert code in (0, 3) and "ttm.pages_limit" in out and "amdgpu GTT" in out
    code, out, _ = run(capsys, "plan", "--gpu", "dgx-spark", "--model", "qwen3-235b-a22b-q2_k", "--draft", "none")
    assert code in (0, 3) and "ttm.pages_limit" not in out


def test_ram_beyond_a_unified_machine_is_a_usage_error(capsys):
    code, out, err = run(capsys, "plan", "--gpu", "dgx-spark", "--model", "llama-3.1-8b-q4", "--ram", "256")
    assert code == 2 and out == "" and err.startswith("error: --ram 256 GiB is more than")


@pytest.mark.parametrize(("gpu", "words"), [
    ("4090,strix-halo", "cannot be in one machine"),
    ("dgx-spark,5090", "cannot be in one machine"),
    ("dgx-spark,strix-halo", "one chip"),
    ("4090,m3-ultra-512", "cannot be in one machine"),
    ("m3-ultra-512,4090", "cannot be in one machine"),
    ("m3-ultra-96,m2-max-64", "one chip"),
    ("m3-ultra-512,m3-ultra-512", "one chip"),
    ("", "empty"),
    ("  ", "empty"),
    ("4090,,3090", "empty name"),
    ("4090,none", "cannot be combined"),
])
def test_impossible_machines_are_usage_errors(capsys, gpu, words):
    code, out, err = run(capsys, "plan", "--gpu", gpu, "--model", "llama-3.1-8b-q4")
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert len(lines) == 2 and lines[0].startswith("error: ") and lines[1].startswith("hint: ")
    assert words in lines[0] and "--gpu" in lines[1], err


def test_ram_beyond_a_named_macs_memory_is_a_usage_error(capsys):
    code, _, err = run(capsys, "plan", "--gpu", "m3-ultra-96", "--ram", "128", "--model", "llama-3.1-8b-q4")
    assert code == 2 and err.startswith("error: ") and "96 GiB" in err and "hint: " in err
    code, out, _ = run(capsys, "plan", "--gpu", "m3-ultra-96", "--ram", "64", "--model", "llama-3.1-8b-q4", "--json")
    assert code == 0 and json.loads(out)["devices"][-1]["capacity_bytes"] < 64 * 2**30  # less is fine: less is free


@pytest.mark.parametrize(("flag", "typo", "want"), [
    ("--gpu", "m3ultra96x", "m3-ultra-96"), ("--gpu", "306012x", "rtx-3060-12g"),
    ("--model", "lama-3.1-70b", "llama-3.1-70b"), ("--draft", "eagle3-lama3.1-8b", "eagle3-llama3.1-8b"),
])
def test_unknown_names_hint_the_catalogues_own_spelling(capsys, flag, typo, want):
    args = {"--gpu": ["--model", "llama-3.1-8b-q4"], "--model": ["--gpu", "4090"], "--draft": ["--gpu", "4090", "--model", "llama-3.1-8b-q4"]}
    code, _, err = run(capsys, "plan", flag, typo, *args[flag])
    assert code == 2
    hint = err.splitlines()[1]
    names = hint.removeprefix("hint: nearest: ").split(", ")
    assert want in names, hint
    from homespec.catalog import load_catalog

    cat = load_catalog()
    for n in names:  # every name the hint offers resolves as written
        {"--gpu": cat.gpu, "--model": cat.model, "--draft": cat.draft}[flag](n)


def _parsed(command: str, args: list[str]) -> dict:
    """What the real parser makes of `homespec COMMAND ARGS` (nothing is run)."""
    import typer

    from homespec.cli import app

    cmd = typer.main.get_command(app).commands[command]
    return cmd.make_context(command, list(args)).params


@pytest.mark.parametrize("args", [[], ["--ctx", "2048"], ["--draft-depth", "3"],
                                  ["--draft-tokens", "9", "--draft-depth", "3", "--draft-topk", "2"]])
@pytest.mark.parametrize("command", ["generate", "chat", "bench"])
def test_default_plan_is_the_plan_the_run_starts_with(capsys, smollm2_path, command, args):
    """`homespec plan ARGS` and the plan `generate/chat/bench ARGS` start llama.cpp with agree: context,
    draft shape, KV, placement, the draft head (the shipped one for the embedded model) and every byte."""
    from homespec.backends.settings import settings_from_plan
    from homespec.cli import RunArgs
    from homespec.plan.render import to_json
    from homespec.engine.setup import plan_for_run
    from homespec.embedded import DEFAULT_HEAD
    from homespec.engine.options import resolve_model_path

    code, out, _ = run(capsys, "plan", "--json", *args)
    assert code == 0
    planned = json.loads(out)
    extra = ["--prompt", "x"] if command == "generate" else []
    p = _parsed(command, extra + args)
    opts = RunArgs(model=p["model"], draft=p["draft"], method=p.get("method", "eagle3"), backend=p["backend"],
                   ctx=p["ctx"], draft_depth=p["draft_depth"], draft_topk=p["draft_topk"],
                   draft_tokens=p["draft_tokens"]).options()
    ran = to_json(plan_for_run(opts, resolve_model_path(opts.model)))
    assert ran["settings"] == planned["settings"]
    assert ran["draft"] == planned["draft"] and ran["items"] == planned["items"]
    s = planned["settings"]
    assert (opts.ctx, opts.draft_depth, opts.draft_topk, opts.draft_tokens) == (
        s["n_ctx"], s["draft_depth"], s["draft_topk"], s["tree_tokens"])
    started = settings_from_plan(plan_for_run(opts, resolve_model_path(opts.model)))
    assert (started.n_ctx, started.n_batch, started.n_ubatch, started.n_gpu_layers, started.type_k,
            started.flash_attn) == (s["n_ctx"], s["n_batch"], s["n_ubatch"], s["n_gpu_layers"], s["type_k"],
                                    s["flash_attn"])
    if (DEFAULT_HEAD / "config.json").is_file():
        head = json.loads((DEFAULT_HEAD / "config.json").read_text())
        assert planned["draft"]["source"] == str(DEFAULT_HEAD)
        assert planned["draft"]["draft_vocab"] == head["draft_vocab_size"]


def test_default_plan_describes_the_shipped_head(capsys, smollm2_path):
    from homespec.embedded import DEFAULT_HEAD

    if not (DEFAULT_HEAD / "config.json").is_file():
        pytest.skip("no shipped head in this install")
    code, out, _ = run(capsys, "plan", "--gpu", "none", "--json")
    default = json.loads(out)
    code2, out2, _ = run(capsys, "plan", "--gpu", "none", "--json", "--draft", str(DEFAULT_HEAD))
    assert code == code2 == 0
    assert default["items"] == json.loads(out2)["items"]
    assert not any("assumed" in n for n in default["notes"])
    code, out, _ = run(capsys, "plan", "--gpu", "none")  # the table says it too
    assert "draft vocab 8,192" in out and "32,000" not in out


@pytest.mark.parametrize(("gpu", "shape"), [("none", (4, 1, 5)), ("4090", (6, 8, 48))])
def test_plan_draft_shape_follows_the_machine_planned_for(capsys, gpu, shape):
    code, out, _ = run(capsys, "plan", "--gpu", gpu, "--model", "llama-3.1-8b-q4", "--json")
    s = json.loads(out)["settings"]
    assert (s["draft_depth"], s["draft_topk"], s["tree_tokens"]) == shape and s["n_ctx"] == 4096


def test_plan_says_which_draft_it_assumes_for_a_model_with_no_known_head(capsys):
    code, out, _ = run(capsys, "plan", "--gpu", "4090", "--model", "qwen2.5-7b-q4", "--json")
    p = json.loads(out)
    assumed = [n for n in p["notes"] if n.startswith("draft:")]
    assert len(assumed) == 1 and "assumed eagle3.1 head" in assumed[0] and "32,000" in assumed[0]
    assert p["draft"]["name"] == "homespec-eagle3.1-qwen2.5-7b"
    code, out, _ = run(capsys, "plan", "--gpu", "4090", "--model", "llama-3.1-8b-q4", "--json")
    assert not any(n.startswith("draft:") for n in json.loads(out)["notes"])  # its published head is known
