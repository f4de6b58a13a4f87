"""`homespec plan --emit`: commands that run as printed, or say what they still need."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from homespec.cli import main
from homespec.plan.emit import LLAMA_SERVER_FLAGS, VLLM_FLAGS

FLAGS_FILE = Path(__file__).parents[1] / "data" / "llama_server_flags.txt"

# Plans covering every branch of the llama-server command: CPU only, one GPU, a split over two, quantised
# KV, flash attention off, no draft, a published head, an assumed head, a plan that does not fit.
LLAMA_SERVER_PLANS = [
    ["--gpu", "none"],
    ["--gpu", "4090", "--model", "llama-3.1-8b-q4"],
    ["--gpu", "4090,3090", "--model", "llama-3.1-70b-q4", "--kv-type", "q8_0"],
    ["--gpu", "4090", "--model", "qwen2.5-7b-q5", "--no-flash-attn", "--ctx", "2048"],
    ["--gpu", "4090", "--model", "llama-3.1-8b-q4", "--draft", "none"],
    ["--gpu", "3060", "--model", "llama-3.1-405b-q4", "--ram", "32"],
]


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def server_flags() -> tuple[dict[str, list[str]], set[str]]:
    """The flags llama-server accepts (with their fixed values) and the ones it rejects as removed."""
    accepted: dict[str, list[str]] = {}
    removed: set[str] = set()
    for line in FLAGS_FILE.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        if line.startswith("!"):
            removed.add(line[1:])
            continue
        flag, *values = line.split()
        accepted[flag] = values
    return accepted, removed


def emitted(capsys, target: str, args: list[str]) -> tuple[int, dict, str]:
    code, out, err = run(capsys, "plan", "--json", "--emit", target, *args)
    return code, json.loads(out), err


def flags_of(command: str) -> list[tuple[str, str | None]]:
    words = shlex.split(command)[1:]
    out = []
    for i, w in enumerate(words):
        if w.startswith("-") and not re.fullmatch(r"-\d+", w):
            out.append((w, words[i + 1] if i + 1 < len(words) and not words[i + 1].startswith("--") else None))
    return out


def test_flag_list_is_from_the_pinned_llama_cpp_python():
    """The copy the test reads is of the llama.cpp the project pins; regenerate it when the pin moves."""
    pin = re.search(r"llama-cpp-python==([\d.]+)", (Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert pin and f"llama-cpp-python {pin.group(1)}" in FLAGS_FILE.read_text().splitlines()[0]
    accepted, removed = server_flags()
    assert "--draft-max" in removed and "--spec-draft-n-max" in accepted and "-c" in accepted


def test_every_llama_server_flag_the_emitter_prints_is_accepted(capsys, smollm2_path):
    accepted, removed = server_flags()
    assert set(LLAMA_SERVER_FLAGS) <= set(accepted), set(LLAMA_SERVER_FLAGS) - set(accepted)
    seen = set()
    for args in LLAMA_SERVER_PLANS + [["--gpu", "none", "--draft", str(smollm2_path)]]:
        code, p, _ = emitted(capsys, "llama-server", args)
        assert code in (0, 3), args
        command = p["emit"]["command"]
        assert command.startswith("llama-server ")
        for flag, value in flags_of(command):
            assert flag in LLAMA_SERVER_FLAGS and flag in accepted and flag not in removed, (flag, command)
            if accepted[flag]:  # a fixed set of values: -fa, --spec-type, --cache-type-k/v
                assert value in accepted[flag], (flag, value, command)
            seen.add(flag)
    assert {"--spec-draft-model", "--spec-draft-n-max", "--spec-type", "--tensor-split", "-fa"} <= seen


@pytest.mark.parametrize("target", ["llama-server", "vllm"])
def test_no_command_points_silently_at_a_file_that_does_not_exist(capsys, target, smollm2_path):
    """Every model or draft the command names exists here, or a note (a `# ` line and a warning) names it."""
    for args in LLAMA_SERVER_PLANS + [["--gpu", "none", "--draft", str(smollm2_path)]]:
        code, p, err = emitted(capsys, target, args)
        e = p["emit"]
        words = shlex.split(e["command"])
        paths = [words[2]] + [words[i + 1] for i, w in enumerate(words) if w in ("--spec-draft-model", "--tokenizer")]
        spec = next((words[i + 1] for i, w in enumerate(words) if w == "--speculative-config"), None)
        if spec:
            paths.append(json.loads(spec)["model"])
        for path in paths:
            local = path.endswith(".gguf") or path.startswith((".", "/"))
            if local and not Path(path).exists():
                assert any(path in n for n in e["notes"]), (path, e)
                assert any(path in line and line.startswith("warning: ") for line in err.splitlines()), err


def test_shipped_head_is_marked_as_needing_a_gguf_export(capsys):
    from homespec.embedded import DEFAULT_HEAD

    if not (DEFAULT_HEAD / "config.json").is_file():
        pytest.skip("no shipped head in this install")
    code, out, err = run(capsys, "plan", "--gpu", "none", "--emit", "llama-server")
    assert code == 0
    *comments, command = out.strip().splitlines()
    draft = shlex.split(command)[shlex.split(command).index("--spec-draft-model") + 1]
    assert not Path(draft).exists() and draft.endswith(".gguf")
    assert any(draft in c and "homespec draft export" in c and "--eagle3-twin" in c and str(DEFAULT_HEAD) in c
               for c in comments), comments
    assert "warning: " in err and "--draft-max" not in command
    # vLLM reads the head's own directory
    code, out, _ = run(capsys, "plan", "--gpu", "none", "--emit", "vllm")
    spec = shlex.split(out.strip().splitlines()[-1])
    assert json.loads(spec[spec.index("--speculative-config") + 1])["model"] == str(DEFAULT_HEAD)


def test_a_gguf_draft_model_that_exists_is_used_as_given(capsys, smollm2_path):
    code, p, err = emitted(capsys, "llama-server", ["--gpu", "none", "--draft", str(smollm2_path)])
    words = shlex.split(p["emit"]["command"])
    assert words[words.index("--spec-draft-model") + 1] == str(smollm2_path)
    assert words[words.index("--spec-type") + 1] == "draft-simple" and p["emit"]["notes"] == []


@pytest.mark.parametrize("target", ["llama-server", "vllm"])
def test_an_exl2_plan_is_refused_with_a_gguf_hint(capsys, target):
    code, out, err = run(capsys, "plan", "--gpu", "4090", "--model", "mistral-7b-exl2-4.65", "--emit", target)
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 2, err
    assert lines[0].startswith("error: ") and "EXL2" in lines[0]
    assert lines[1].startswith("hint: ") and "mistral-7b-q4" in lines[1]
    assert main(["plan", "--gpu", "4090", "--model", "mistral-7b-q4", "--emit", target]) == 0  # the hint runs


@pytest.mark.parametrize(("quant", "served"), [("q4", "Q4_K_M.gguf"), ("q8", "Q8_0.gguf"),
                                               ("f16", "meta-llama/Llama-3.1-8B-Instruct")])
def test_vllm_serves_the_plans_quantisation(capsys, quant, served):
    code, p, err = emitted(capsys, "vllm", ["--gpu", "4090", "--model", f"llama-3.1-8b-{quant}"])
    words = shlex.split(p["emit"]["command"])
    assert code == 0 and words[:2] == ["vllm", "serve"] and words[2].endswith(served), words
    assert all(f in VLLM_FLAGS for f, _ in flags_of(p["emit"]["command"]))
    if served.endswith(".gguf"):  # a GGUF of the plan's own quant, the base model's tokenizer, and how to load it
        assert words[words.index("--tokenizer") + 1] == "meta-llama/Llama-3.1-8B-Instruct"
        assert any("vllm-gguf-plugin" in n for n in p["emit"]["notes"])
    else:
        assert not any(w.endswith(".gguf") for w in words) and p["emit"]["notes"] == []


def test_a_plan_that_does_not_fit_warns_and_exits_3(capsys):
    args = ["plan", "--gpu", "3060", "--model", "llama-3.1-405b-q4", "--ram", "32"]
    for target in ("llama-server", "vllm"):
        code, out, err = run(capsys, *args, "--emit", target)
        assert code == 3
        assert any(l.startswith("# ") and "does not fit" in l for l in out.splitlines()), out
        assert any(l.startswith("warning: ") and "does not fit" in l for l in err.splitlines()), err
        code, out, err = run(capsys, *args, "--emit", target, "--json")
        assert code == 3 and any("does not fit" in n for n in json.loads(out)["emit"]["notes"])


def test_json_with_emit_is_the_plan_json_with_the_command(capsys):
    args = ["plan", "--gpu", "4090", "--model", "llama-3.1-8b-q4", "--json"]
    code, out, _ = run(capsys, *args)
    plain = json.loads(out)
    code, out, _ = run(capsys, *args, "--emit", "llama-server")
    p = json.loads(out)
    assert code == 0 and {k: v for k, v in p.items() if k != "emit"} == plain
    assert p["emit"]["target"] == "llama-server" and p["emit"]["command"].startswith("llama-server -m ")
    assert isinstance(p["emit"]["notes"], list)


def test_a_directory_holding_one_gguf_emits_the_file(capsys, smollm2_path, tmp_path):
    """`--model DIR` / `--draft DIR` read the one GGUF inside; llama-server needs that file, not the directory."""
    for name in ("target", "draft"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "m.gguf").symlink_to(smollm2_path)
    code, p, _ = emitted(capsys, "llama-server", ["--gpu", "none", "--model", str(tmp_path / "target"),
                                                  "--draft", str(tmp_path / "draft")])
    words = shlex.split(p["emit"]["command"])
    assert code == 0 and words[words.index("-m") + 1] == str(tmp_path / "target" / "m.gguf")
    assert words[words.index("--spec-draft-model") + 1] == str(tmp_path / "draft" / "m.gguf")


def test_vllm_emit_reports_its_kv_capacity_by_hand():
    """vLLM's KV after weights at --gpu-memory-utilization (homespec.plan.vllm_kv), worked by hand for
    Llama-3.1-8B F16 on one H100 SXM (80 GB) at 0.9: 128 KiB of K and V per token (32 layers x 8 heads x
    (128 + 128) x 2 bytes)."""
    from homespec.plan.api import PlanRequest, make_plan
    from homespec.plan.emit import emit
    from homespec.plan.vllm_kv import MAX_BATCHED_TOKENS, MAX_SEQS

    p = make_plan(PlanRequest(model="llama-3.1-8b-f16", gpu="h100-sxm", ram=64, ctx=32768, draft="none"))
    e = emit(p, "vllm")
    kv = e.kv_capacity
    weights = sum(t.n_bytes for t in p.model.tensors)
    acts = MAX_BATCHED_TOKENS * (2 * 4096 + 2 * 14336) * 2 + MAX_SEQS * 128256 * 4
    budget = int(p.machine.gpus[0].total_bytes * 0.9) - weights - acts - 450 * 2**20
    assert kv["budget_bytes"] == budget and kv["per_token_bytes"] == 32 * 8 * 256 * 2
    assert kv["tokens"] == budget // (32 * 8 * 256 * 2) and kv["sequences"] == budget // (32 * 8 * 256 * 2 * 32768)
    assert f"about {kv['tokens']:,} tokens" in e.text()
    low = emit(p, "vllm", gpu_memory_utilization=0.5)
    assert "--gpu-memory-utilization 0.5" in low.command and low.kv_capacity["tokens"] < kv["tokens"]
    from homespec.errors import UsageError

    with pytest.raises(UsageError):
        emit(p, "vllm", gpu_memory_utilization=1.5)
