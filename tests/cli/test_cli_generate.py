"""`homespec generate` end to end on the real SmolLM2 file: exit codes, JSON fields, methods agree."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from homespec.cli import main

pytestmark = pytest.mark.slow


def gen(capsys, *args: str) -> tuple[int, list[dict], str]:
    code = main(["generate", *args])
    out, err = capsys.readouterr()
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return code, rows, err


def test_generate_json_fields_and_greedy_methods_agree(capsys, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(
        json.dumps({"prompt": "List the planets of the solar system, one per line."}) + "\n"
        + json.dumps({"turns": ["Say 'ready' and nothing else.", "ignored second turn"]}) + "\n"
    )
    code, none_rows, err = gen(capsys, "--prompts", str(prompts), "--method", "none", "-n", "24", "--json")
    assert code == 0, err
    assert len(none_rows) == 2
    r = none_rows[0]
    # the row's fields are an interface: exactly these (plus "guard" when a guard ran)
    assert set(r) == {"text", "token_ids", "prompt_token_ids", "tokens_per_s", "mean_accepted", "target_passes",
                      "acceptance_by_depth", "prefill_ms", "finish", "cached_tokens", "method", "backend", "model",
                      "memory"}
    assert r["model"].endswith(".gguf")
    assert r["mean_accepted"] == pytest.approx(1.0)
    assert r["target_passes"] == len(r["token_ids"]) or r["finish"] == "eos"
    assert {"planned", "measured"} <= set(r["memory"])
    code, ngram_rows, err = gen(capsys, "--prompts", str(prompts), "--method", "ngram", "-n", "24", "--json")
    assert code == 0, err
    # greedy n-gram speculation emits the target's own greedy tokens (batched verification may differ
    # only where llama.cpp's batch kernels flip a near-tie; these short answers have none)
    assert [x["token_ids"] for x in ngram_rows] == [x["token_ids"] for x in none_rows]


def test_generate_torch_and_llamacpp_agree_on_a_short_greedy_answer(capsys):
    args = ["-p", "What is 2 + 2? Answer with one number.", "-n", "8", "--method", "none", "--json"]
    _, a, _ = gen(capsys, *args, "--backend", "llamacpp")
    _, b, _ = gen(capsys, *args, "--backend", "torch")
    assert a[0]["token_ids"] == b[0]["token_ids"]


def _run_cli_lines(*argvs: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run `homespec` commands one after another in one child process: an abort inside llama.cpp
    shows up as its exit code instead of taking the test run down. Each command's stderr follows
    a `--- next` line; stdout gets `rc N` after each."""
    code = ("import json, sys; from homespec.cli import main\n"
            "for argv in json.loads(sys.argv[1]):\n"
            "    print('--- next', file=sys.stderr, flush=True)\n"
            "    print('rc', main(argv), flush=True)\n"
            "    sys.stderr.flush()\n")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2]), GGML_NO_BACKTRACE="1", **(env or {}))
    return subprocess.run([sys.executable, "-c", code, json.dumps(argvs)], capture_output=True, text=True,
                          timeout=600, env=env)


BAD_INPUT = [
    (["--method", "telepathy", "-p", "hi"], 2),
    (["-p", "hi", "--prompts", "x.jsonl"], 2),
    (["--model", "/nonexistent.gguf", "-p", "hi"], 2),
    (["--method", "draft", "-p", "hi"], 2),
    (["--max-tokens", "0", "-p", "hi"], 2),
    (["--method", "eagle3", "--draft", "/nonexistent-head", "-p", "hi"], 2),
    (["--backend", "bogus", "-p", "hi"], 2),
    (["--threads", "0", "-p", "hi"], 2),
    (["--threads", "-3", "-p", "hi"], 2),
    (["--window", "-1", "-p", "hi"], 2),
    (["--ctx", "1", "-p", "hi"], 2),
    (["--ctx", "8", "--backend", "torch", "-p", "hi"], 2),
    (["--ctx", "40", "--draft-tokens", "48", "--draft-topk", "8", "--draft-depth", "6", "-p", "hi"], 2),
    (["--ctx", "16", "--method", "ngram", "--draft-depth", "15", "-p", "hi"], 2),
    (["--draft-tokens", "300", "--draft-topk", "8", "--draft-depth", "6", "-p", "hi"], 2),
    (["--backend", "torch", "--device", "tpu", "-p", "hi"], 2),
    (["-p", "word " * 300, "--ctx", "64"], 2),
]


def test_generate_bad_input():
    """Each is refused in two lines before the weights load: llama.cpp, echoing its log, never
    reports a model buffer. One child process runs them all, so an input that reaches a llama.cpp
    assert fails the test instead of aborting the test run."""
    r = _run_cli_lines(*(["generate", *args] for args, _ in BAD_INPUT), env={"HOMESPEC_LLAMA_LOG": "1"})
    codes = [line for line in r.stdout.splitlines() if line.startswith("rc ")]
    errs = r.stderr.split("--- next\n")[1:]
    assert r.returncode == 0 and len(codes) == len(errs) == len(BAD_INPUT), (r.stdout + r.stderr)[-1500:]
    for (args, code), got, err in zip(BAD_INPUT, codes, errs):
        assert got == f"rc {code}", (args, got, err[-800:])
        lines = [line for line in err.splitlines() if not line.startswith("llama.cpp: ")]
        assert len(lines) == 2 and lines[0].startswith("error: ") and lines[1].startswith("hint: "), (args, err[-800:])
        assert "model buffer size" not in err, args


def test_a_prompt_longer_than_the_context_names_the_context_asked_for(capsys):
    """llama.cpp pads the KV cache to 256 cells; the error names --ctx and suggests one that fits."""
    code, _, err = gen(capsys, "-p", "word " * 300, "--ctx", "64", "--method", "none")
    assert code == 2
    assert "--ctx 64" in err and "256" not in err.splitlines()[0]
    assert "--ctx 768" in err  # 331 prompt tokens + 256 to generate, rounded up to 256s


def test_small_contexts_and_wide_trees_run_instead_of_aborting():
    """`generate -p hi --ctx 32 -n 8` aborted in llama.cpp (GGML_ASSERT, exit 134): the context
    was created for 64 sequences where it can hold min(n_ctx, n_batch). The smallest contexts under
    the default chain, a 48-node tree of up to 47 leaves in a context of 50, and a draft model whose
    backend starts without a plan all run."""
    from homespec.embedded import smollm2_path

    gen_ = ["generate", "-n", "8", "--json", "--threads", "2"]
    cases = [
        [*gen_, "-p", "hi", "--ctx", "32"],
        [*gen_, "-p", "hi", "--no-chat", "--ctx", "16"],
        [*gen_, "-p", "hi", "--no-chat", "--ctx", "50", "--draft-depth", "6", "--draft-topk", "8", "--draft-tokens", "48"],
        [*gen_, "-p", "hi", "--no-chat", "--ctx", "16", "--method", "draft", "--draft", str(smollm2_path())],
    ]
    r = _run_cli_lines(*cases)
    assert r.returncode == 0, f"exit {r.returncode}: " + (r.stdout + r.stderr)[-1500:]
    assert [line for line in r.stdout.splitlines() if line.startswith("rc ")] == ["rc 0"] * len(cases), r.stderr[-1500:]
    rows = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == len(cases) and all(row["token_ids"] for row in rows)


def test_generate_json_reports_the_guard(capsys):
    code, rows, err = gen(capsys, "-p", "Count from 1 to 12, separated by commas.", "-n", "40", "--method", "ngram", "--json")
    assert code == 0, err
    g = rows[0]["guard"]
    assert g["plain_steps"] >= 2 and g["speculative_steps"] + g["plain_steps"] <= rows[0]["target_passes"]


def test_draft_train_refuses_a_missing_target(capsys):
    code = main(["draft", "train", "--target", "/nonexistent/model.gguf", "--out", "/tmp/never"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ")


def test_draft_train_refuses_a_bad_init_before_any_data(capsys, tmp_path):
    """--init is read and checked before data generation starts: a directory with no head, a head
    of the other kind, or the output directory itself is a one-line error, and nothing is written
    under --out."""
    from homespec.embedded import DEFAULT_HEAD

    out = tmp_path / "run"
    code = main(["draft", "train", "--out", str(out), "--init", str(tmp_path / "nohead")])
    err = capsys.readouterr().err
    assert code != 0 and err.startswith("error: ") and "config.json" in err and len(err.strip().splitlines()) <= 2
    code = main(["draft", "train", "--out", str(out), "--eagle3", "--init", str(DEFAULT_HEAD)])
    err = capsys.readouterr().err
    assert code == 2 and "not plain EAGLE-3" in err and "drop --eagle3" in err
    code = main(["draft", "train", "--out", str(DEFAULT_HEAD), "--init", str(DEFAULT_HEAD)])
    err = capsys.readouterr().err
    assert code == 2 and "overwrite" in err and "another --out" in err
    assert not out.exists()


def test_a_damaged_safetensors_file_reads_the_same_in_plan_and_generate(capsys, tmp_path):
    """The torch backend said "internal error: SafetensorError" where `plan` said what was wrong."""
    from tiny_models import make_tiny_hf_dir

    folder = make_tiny_hf_dir(tmp_path / "tiny", n_layer=1)
    (folder / "model.safetensors").write_bytes(b"\1\2")
    assert main(["plan", "--model", str(folder), "--gpu", "none"]) == 1
    planned = capsys.readouterr().err
    code, _, err = gen(capsys, "--backend", "torch", "--model", str(folder), "-p", "hi", "--method", "none")
    assert code == 1 and err == planned
    assert err.startswith(f"error: {folder / 'model.safetensors'}: truncated safetensors file\nhint: ")


def test_ctrl_c_during_generate_is_one_line_and_exit_130(smollm2_path):
    """Typer turns KeyboardInterrupt into exit 130 before homespec's handler sees it: the interrupt
    still gets its one line, and no traceback."""
    import select
    import signal
    import time

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    child = subprocess.Popen(
        [sys.executable, "-m", "homespec", "generate", "--model", str(smollm2_path), "--method", "none", "--no-chat",
         "-p", "1, 2, 3, 4, 5, 6, 7, 8, 9, 10,", "-n", "3000", "--threads", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # a background shell's runs ignore SIGINT
    try:
        deadline = time.monotonic() + 120  # a bound on waiting for the first token, not a speed assertion
        while not select.select([child.stdout], [], [], 1.0)[0]:
            assert child.poll() is None and time.monotonic() < deadline, child.stderr.read().decode()
        child.stdout.read1(1)  # decoding has started
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
    err = err.decode()
    assert child.returncode == 130, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("error: interrupted")
