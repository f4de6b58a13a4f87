"""homespec.bench.llamaserver (bench --against llama-server, benchmarks/suites/llamacpp.py): llama-server's
figures and the side-by-side table, from real llama-server
responses (recorded under tests/data/, made by the server that scripts/build_llamacpp_tools.sh builds), and from
a live llama-server on 127.0.0.1 when that binary is built on this machine (it is not on CI)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from homespec.bench import llamaserver as bench

DATA = Path(__file__).parents[1] / "data"


def _recorded() -> dict:
    return json.loads((DATA / "llama_server_completions.json").read_text())


def test_server_figures_from_recorded_responses():
    rec = _recorded()
    plain, spec = bench.server_figures(rec["plain"]), bench.server_figures(rec["eagle3"])
    n = sum(r["timings"]["predicted_n"] for r in rec["eagle3"])
    acc = sum(r["timings"]["draft_n_accepted"] for r in rec["eagle3"])
    assert spec["tokens"] == n and spec["draft_n_accepted"] == acc
    assert spec["tokens_per_pass"] == pytest.approx(n / (n - acc))
    assert plain["draft_n"] == 0 and plain["tokens_per_pass"] == pytest.approx(1.0)
    assert plain["tokens_per_s"] > 0 and len(plain["outputs"]) == len(rec["plain"])
    # greedy speculative decoding in llama-server emits what plain greedy decoding emits
    assert bench.identical(spec["outputs"], plain["outputs"]) == 1.0


def test_table_puts_every_method_beside_llama_server_plain():
    rec = _recorded()
    rows = {"llama-server plain": bench.server_figures(rec["plain"]), "llama-server eagle3": bench.server_figures(rec["eagle3"])}
    for r in rows.values():
        r["identical_to_llama_server_plain"] = bench.identical(r["outputs"], rows["llama-server plain"]["outputs"])
    md = bench.table(rows)
    lines = md.strip().splitlines()
    assert lines[0].startswith("| method | tokens/s") and len(lines) == 4
    assert "| llama-server plain |" in lines[2] and "1.00x" in lines[2] and "100%" in lines[2]


def test_identical_compares_the_common_prefix():
    assert bench.identical([[1, 2, 3], [4, 5]], [[1, 2], [4, 6]]) == 0.5


def _built_server() -> Path | None:
    try:
        return bench.find_server()
    except bench.UsageError:
        return None


@pytest.mark.skipif(_built_server() is None, reason="llama-server is not built (scripts/build_llamacpp_tools.sh)")
def test_live_llama_server_drafts_with_an_exported_head(tmp_path, smollm2_path):
    """A real llama-server with its eagle3 drafter on a head homespec exported: it loads, drafts and reports
    draft figures, and its greedy answer equals plain llama-server's."""
    import torch

    from homespec.backends.tokenizer import load_tokenizer
    from homespec.heads.gguf import read_target, write_eagle3_gguf
    from homespec.nets.eagle3 import Eagle3Config, Eagle3Head

    t = read_target(smollm2_path)
    torch.manual_seed(0)
    head = Eagle3Head(Eagle3Config(hidden_size=t.n_embd, num_attention_heads=9, num_key_value_heads=3, head_dim=64,
                                   intermediate_size=256, vocab_size=t.n_vocab, draft_vocab_size=t.n_vocab,
                                   target_hidden_size=t.n_embd)).eval()
    gguf = tmp_path / "d.gguf"
    write_eagle3_gguf(head, t, gguf, dtype="f16", name="random")
    tok = load_tokenizer(str(smollm2_path))
    ids = tok.encode("The capital of France is")
    out = {}
    for name, args in (("plain", []), ("eagle3", ["--spec-type", "draft-eagle3", "--spec-draft-model", str(gguf),
                                                  "--spec-draft-n-max", "3", "--spec-draft-p-min", "0"])):
        with bench.Server(_built_server(), str(smollm2_path), args, 512, 2, tmp_path / f"{name}.log") as srv:
            out[name] = srv.complete(ids, 12)
    assert out["eagle3"]["timings"]["draft_n"] > 0
    assert out["eagle3"]["tokens"] == out["plain"]["tokens"]


def _run(capsys, *args: str) -> tuple[int, str, str]:
    from homespec.cli import main

    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("args,needle", [
    (["--server-draft", "x.gguf"], "--against llama-server"),
    (["--against", "vllm"], "only llama-server"),
    (["--against", "llama-server", "--temperature", "0.7"], "greedy"),
    (["--against", "llama-server", "--server", "/nonexistent/llama-server"], "not an executable"),
    (["--against", "llama-server", "--server-draft", "/nonexistent.gguf"], "draft export"),
])
def test_against_usage_errors_come_before_any_load(capsys, args, needle):
    code, out, err = _run(capsys, "bench", "--limit", "1", *args)
    assert code == 2 and out == "" and needle in err and "Traceback" not in err


@pytest.mark.skipif(_built_server() is None, reason="llama-server is not built (scripts/build_llamacpp_tools.sh)")
def test_bench_against_llama_server_json(capsys):
    code, out, err = _run(capsys, "bench", "--methods", "none", "--limit", "2", "-n", "8", "--threads", "1",
                          "--against", "llama-server", "--json")
    assert code == 0, err
    rows = json.loads(out)["against_llama_server"]
    assert list(rows) == ["llama-server plain", "homespec none"]
    assert rows["llama-server plain"]["ratio_vs_llama_server_plain"] == 1.0
    assert rows["homespec none"]["identical_to_llama_server_plain"] == 1.0  # the same greedy answers
    assert rows["homespec none"]["tokens"] > 0 and rows["llama-server plain"]["tokens_per_pass"] == 1.0
