"""`homespec plan` and `homespec probe` end to end, through the real entry point."""

from __future__ import annotations

import json
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
    code, out, _ = run(capsys, "plan", "--gpu", "4090", "--model", "llama-3.1-70b-q4", "--ram", "128", "--json")
    assert code == 0
    p = json.loads(out)
    assert p["verdict"] == "fits_offloaded"
    assert 0 < p["offloaded_layers"] < 80
    assert any("entirely on GPUs" in s for s in p["suggestions"])  # e.g. two more 4090s
    assert any("more layers on the GPU" in s for s in p["suggestions"])  # a q8_0 KV cache


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
    assert code == 2 and err.strip().startswith(f"error: --threads {threads} is not positive") and "hint: " in err


def test_corrupt_gguf_is_an_error_not_a_traceback(capsys, tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 64)
    code, _, err = run(capsys, "plan", "--gpu", "4090", "--model", str(bad))
    assert code in (1, 2)
    assert err.startswith("error: ") and "hint: " in err and "Traceback" not in err


def test_emit_llama_server_and_vllm(capsys):
    code, out, _ = run(capsys, "plan", "--gpu", "4090", "--model", "llama-3.1-8b-q4", "--emit", "llama-server")
    assert code == 0
    assert out.startswith("llama-server ") and "-ngl 33" in out and "--spec-type draft-eagle3" in out
    code, out, _ = run(capsys, "plan", "--gpu", "4090,4090", "--model", "llama-3.1-8b-q4", "--emit", "vllm")
    assert '"method":"eagle3"' in out and "--tensor-parallel-size 2" in out


def test_plan_and_probe_import_neither_torch_nor_llama_cpp():
    code = (
        "import sys; from homespec.cli import main; "
        "rc = main(['plan', '--gpu', '4090', '--model', 'llama-3.1-70b-q4', '--json']); "
        "rc2 = main(['probe', '--json']); "
        "bad = [m for m in ('torch', 'llama_cpp', 'transformers') if m in sys.modules]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-500:] + r.stderr[-500:]


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
