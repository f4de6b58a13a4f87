"""`homespec bench` end to end on the real SmolLM2 file: the JSON interface, same-run ratios and the
long-context view (prompts sized with the model's tokenizer, results by prompt length)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from homespec.cli import main

pytestmark = pytest.mark.slow


def bench(capsys, tmp_path, *args: str) -> tuple[dict, str]:
    out = tmp_path / "bench.json"
    code = main(["bench", "--threads", "1", "--json-out", str(out), *args])
    stdout, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out.read_text()), stdout


def test_bench_json_compares_methods_in_one_run(capsys, tmp_path):
    md = tmp_path / "bench.md"
    s, stdout = bench(capsys, tmp_path, "--methods", "ngram,none", "--limit", "2", "-n", "12", "--markdown", str(md))
    assert list(s["methods"]) == ["none", "ngram"]  # the baseline is run first
    none, ngram = s["methods"]["none"], s["methods"]["ngram"]
    # the JSON's fields are an interface: exactly these
    assert set(s) == {"methods", "backend", "model", "n_prompts", "max_tokens", "temperature", "repeat", "lockstep",
                      "targets_loaded", "wall_s", "machine", "plan_estimate", "median_speedup", "by_prompt_length",
                      "by_category"}
    assert set(ngram) == set(none) == {
        "tokens_per_s", "speedup", "mean_accepted", "acceptance_by_depth", "p50_step_ms", "p95_step_ms",
        "identical_fraction", "tokens", "target_passes", "fallback_steps", "spec_tau", "by_position", "per_prompt",
        "memory", "guard", "draft", "drafters"}
    assert set(ngram["per_prompt"][0]) == {"prompt_tokens", "tokens", "decode_s", "tokens_per_s", "spec_tau",
                                           "spec_steps", "spec_tokens", "fallback_steps", "category"}
    assert ngram["guard"] is not None and none["guard"] is None  # --guard is on by default, over a drafter
    assert none["speedup"] == 1.0 and none["mean_accepted"] == 1.0 and none["spec_tau"] is None
    assert ngram["speedup"] == pytest.approx(ngram["tokens_per_s"] / none["tokens_per_s"], rel=1e-3)
    assert ngram["identical_fraction"] == 1.0  # greedy speculation emits the target's tokens
    assert len(ngram["per_prompt"]) == 2 and sum(r["tokens"] for r in ngram["per_prompt"]) == ngram["tokens"]
    # spec_tau counts speculative passes only, mean_accepted every pass
    if ngram["spec_tau"] is not None:
        assert ngram["spec_tau"] >= ngram["mean_accepted"] >= 1.0
    assert s["n_prompts"] == 2 and s["max_tokens"] == 12
    assert s["targets_loaded"] == 1  # both methods on one loaded target
    assert "ngram" in stdout and "| method |" in md.read_text()


def test_bench_long_builds_sized_prompts_and_reports_by_length(capsys, tmp_path):
    s, stdout = bench(capsys, tmp_path, "--long", "--ctx", "1280", "--methods", "none,ngram,eagle3", "--limit", "2",
                      "-n", "8")
    sizes = [r["prompt_tokens"] for r in s["methods"]["none"]["per_prompt"]]
    assert len(sizes) == 2
    assert 400 <= sizes[0] <= 563 and 800 <= sizes[1] <= 1127  # about 512 and 1K tokens, model's own tokenizer
    classes = [c["class"] for c in s["by_prompt_length"]]
    assert classes == [512, 1024]
    row = s["by_prompt_length"][1]["methods"]
    assert row["none"]["min_ratio_vs_none"] is None and row["ngram"]["min_ratio_vs_none"] > 0
    assert s["methods"]["none"]["by_position"][0]["start"] == 0  # bins by context position, 1024 wide
    assert "by prompt length" in stdout
    # the shipped head records its training length, and drafts with that window by default
    assert s["methods"]["eagle3"]["draft"]["window"] == 1024 and s["methods"]["ngram"]["draft"] is None
    assert Path(s["methods"]["eagle3"]["draft"]["head"]).name == "smollm2-135m-instruct"  # the shipped head's directory
    assert s["methods"]["eagle3"]["tokens"] > 0


def test_bench_repeat_keeps_the_median_round_per_prompt(capsys, tmp_path):
    s, stdout = bench(capsys, tmp_path, "--methods", "none,ngram", "--limit", "2", "-n", "8", "--repeat", "3")
    assert s["repeat"] == 3 and "3 rounds" in stdout
    for m in ("none", "ngram"):
        recs = s["methods"][m]["per_prompt"]
        assert len(recs) == 2  # one record per prompt, not per round
        for r in recs:
            rates = r["repeats_tokens_per_s"]
            assert len(rates) == 3 and r["tokens_per_s"] == sorted(rates)[1]
        # totals count every round: 3 rounds x 2 prompts x 7 decoded tokens
        assert s["methods"][m]["tokens"] == 3 * sum(r["tokens"] for r in recs) == 42
    assert s["methods"]["ngram"]["identical_fraction"] == 1.0  # round r of ngram against round r of none


def test_bench_lockstep_gives_each_method_its_own_steps_and_the_same_tokens(capsys, tmp_path):
    # guard off: its choices follow measured step times, so guarded runs need not take the same steps
    plain, _ = bench(capsys, tmp_path, "--methods", "none,ngram", "--limit", "2", "-n", "12", "--no-guard")
    s, stdout = bench(capsys, tmp_path, "--methods", "none,ngram", "--limit", "2", "-n", "12", "--no-guard",
                      "--lockstep")
    assert s["lockstep"] is True and "lockstep" in stdout
    for m in ("none", "ngram"):
        assert s["methods"][m]["tokens"] == plain["methods"][m]["tokens"]
        assert s["methods"][m]["target_passes"] == plain["methods"][m]["target_passes"]  # same steps, not interleaved ones
    assert s["methods"]["ngram"]["identical_fraction"] == 1.0


def test_lockstep_times_each_session_by_its_own_steps():
    from homespec.embedded import smollm2_path
    from homespec.session import RunOptions, Session, final
    from homespec.session.lockstep import lockstep
    from homespec.speculative.steps import Limits

    a = Session.open(RunOptions(model=str(smollm2_path()), method="none", threads=1, ctx=512))
    b = Session.open(RunOptions(model=str(smollm2_path()), method="ngram", threads=1, ctx=512))
    try:
        prompt = a.backend.tokenizer.encode("The list: apples, pears, apples, pears, apples,", add_bos=True)
        limits = Limits(max_tokens=16)
        ra, rb = lockstep([a.stream(prompt, limits=limits), b.stream(prompt, limits=limits)])
        assert ra.token_ids == rb.token_ids == final(a.stream(prompt, limits=limits)).token_ids
        for r in (ra, rb):
            assert r.decode_s == pytest.approx(sum(s.t_step for s in r.steps[1:]))
            assert r.prefill_s == r.steps[0].t_step and r.text
        assert len(rb.steps) <= len(ra.steps)  # n-gram drafting emits more than one token on some steps
    finally:
        a.close()
        b.close()


def test_bench_loads_the_target_once_for_every_method():
    """Without --lockstep the methods take turns on one loaded target (each its own drafter), and
    answer token for token, step for step, as targets loaded one per method (lockstep) do."""
    from homespec.bench.run import run_bench
    from homespec.embedded import smollm2_path
    from homespec.session import RunOptions

    opts = RunOptions(model=str(smollm2_path()), threads=1, ctx=512, draft_depth=4, draft_topk=1, draft_tokens=5)
    texts = ["The list: apples, pears, apples, pears, apples,", "Count from 1 to 10: 1, 2, 3,"]

    def prompts(session):
        return [session.backend.tokenizer.encode(t, add_bos=True) for t in texts]

    methods = ["none", "ngram", "eagle3"]
    shared = run_bench(opts, methods, prompts, max_tokens=12)
    apart = run_bench(opts, methods, prompts, max_tokens=12, lockstep=True)
    assert (shared.targets_loaded, apart.targets_loaded) == (1, 3)
    for m in methods:
        a, b = shared.methods[m], apart.methods[m]
        assert a.outputs == b.outputs and len(a.outputs) == 2, m
        assert (a.passes, a.spec_steps, a.depth_hits) == (b.passes, b.spec_steps, b.depth_hits), m
    assert shared.methods["eagle3"].spec_steps > 0 and shared.methods["ngram"].spec_steps > 0
    assert shared.identical_fraction("eagle3") == shared.identical_fraction("ngram") == 1.0


def test_merge_repeats_picks_the_lower_middle_round():
    from homespec.bench.run import MethodStats

    st = MethodStats("eagle3")
    st.per_prompt = [{"tokens_per_s": 9.0, "spec_steps": 1}, {"tokens_per_s": 10.0, "spec_steps": 0},
                     {"tokens_per_s": 4.0, "spec_steps": 2}, {"tokens_per_s": 12.0, "spec_steps": 3},
                     {"tokens_per_s": 5.0, "spec_steps": 4}]
    st.merge_repeats(4)  # the last four rounds are one prompt; the first record is another prompt's
    assert len(st.per_prompt) == 2 and st.per_prompt[0]["tokens_per_s"] == 9.0
    assert st.per_prompt[1] == {"tokens_per_s": 5.0, "spec_steps": 4, "repeats_tokens_per_s": [10.0, 4.0, 12.0, 5.0]}


def test_bench_rejects_bad_input_with_one_line(capsys):
    assert main(["bench", "--methods", "telepathy"]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err
    assert main(["bench", "--long", "--ctx", "256"]) == 2
    assert "--ctx" in capsys.readouterr().err
    assert main(["bench", "--repeat", "0"]) == 2
    err = capsys.readouterr().err
    assert "--repeat" in err and "Traceback" not in err


def test_bench_json_is_the_switch_it_is_on_every_command(tmp_path):
    """`bench --json` prints the results as JSON on stdout and nothing else there (a real process:
    whatever the backends print would show), as `plan --json` does."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    r = subprocess.run([sys.executable, "-m", "homespec", "bench", "--json", "--methods", "none,ngram", "--limit", "1",
                        "-n", "6", "--threads", "1"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)  # the whole of stdout is the JSON
    assert list(s["methods"]) == ["none", "ngram"] and s["n_prompts"] == 1
    assert "note:" not in r.stderr and list(tmp_path.iterdir()) == []  # no file written


def test_bench_json_file_still_writes_the_file(capsys, tmp_path):
    """The older `--json FILE` keeps working as `--json-out FILE` (the table on stdout, a note on stderr)."""
    out = tmp_path / "old.json"
    code = main(["bench", "--json", str(out), "--methods", "none", "--limit", "1", "-n", "6", "--threads", "1"])
    stdout, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out.read_text())["n_prompts"] == 1
    assert "none" in stdout and not stdout.lstrip().startswith("{")
    assert "note: `bench --json FILE` is now `--json-out FILE`" in err


@pytest.mark.parametrize("args, out", [
    (["--json", "r.json"], ["--json-out", "r.json"]),
    (["--json=r.json", "-n", "4"], ["--json-out=r.json", "-n", "4"]),
    (["--json", "--limit", "2"], ["--json", "--limit", "2"]),
    (["--limit", "2", "--json"], ["--limit", "2", "--json"]),
    (["--json", "-"], ["--json"]),
    (["--json=-"], ["--json"]),
    (["--json-out", "r.json", "--json"], ["--json-out", "r.json", "--json"]),
])
def test_legacy_json_file_reads_a_word_after_json_as_the_file(args, out):
    from homespec.cli import _legacy_json_file

    assert _legacy_json_file(args) == out


@pytest.mark.parametrize("flag", ["--json-out", "--markdown", "--plot"])
def test_bench_refuses_an_unwritable_results_path_before_running(capsys, tmp_path, flag):
    (tmp_path / "a-file").write_text("mine\n")
    cases = ((tmp_path, "is a directory"), (f"{tmp_path / 'not-yet'}/", "is a directory"),
             (tmp_path / "a-file" / "r", "is a file, not a directory"))
    for path, message in cases:
        code = main(["bench", flag, str(path), "--methods", "none", "--limit", "1"])
        stdout, err = capsys.readouterr()
        lines = err.strip().splitlines()
        assert code == 2 and stdout == "", err  # refused before the bench ran: no table
        assert len(lines) == 2 and message in lines[0] and lines[1].startswith("hint: "), err
    assert (tmp_path / "a-file").read_text() == "mine\n"
