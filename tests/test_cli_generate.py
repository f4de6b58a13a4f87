"""`homespec generate` end to end on the real SmolLM2 file: exit codes, JSON fields, methods agree."""

from __future__ import annotations

import json

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
    for key in ("text", "token_ids", "tokens_per_s", "mean_accepted", "target_passes", "prompt_token_ids", "model", "memory"):
        assert key in r
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


@pytest.mark.parametrize(
    "args,code",
    [
        (["--method", "telepathy", "-p", "hi"], 2),
        (["-p", "hi", "--prompts", "x.jsonl"], 2),
        (["--model", "/nonexistent.gguf", "-p", "hi"], 2),
        (["--method", "draft", "-p", "hi"], 2),
        (["--max-tokens", "0", "-p", "hi"], 2),
        (["--method", "eagle3", "--draft", "/nonexistent-head", "-p", "hi"], 2),
    ],
)
def test_generate_bad_input(capsys, args, code):
    got, _, err = gen(capsys, *args)
    assert got == code
    assert err.splitlines()[0].startswith("error: ") and "Traceback" not in err


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
    from homespec.runner import DEFAULT_HEAD

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
