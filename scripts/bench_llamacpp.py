"""homespec beside llama.cpp's own server: the same prompts, target and head, side by side in one run.

    python scripts/bench_llamacpp.py --draft-gguf TWIN.gguf --draft HEAD_DIR [--limit 8] [--max-tokens 64]
           [--server BIN] [--json-out FILE] [--markdown FILE]
    python scripts/bench_llamacpp.py --plain-only [...]      llama-server plain and homespec none alone

Methods, each over homespec's held-out test prompts (chat template, the same token ids for all):
  llama-server plain                        the server binary of scripts/build_llamacpp_tools.sh
  llama-server eagle3                       `--spec-type draft-eagle3 --spec-draft-model TWIN.gguf`
  homespec none / eagle3 (guard) / eagle3 (forced, --no-guard)   homespec.bench.run.run_bench
Per method: tokens/s (decode only: llama-server's timings `predicted_per_second`, homespec's decode
seconds), tokens per target pass (llama-server: predicted_n / (predicted_n - draft_n_accepted), one
target pass per verification step; homespec: tokens / target passes), and the fraction of greedy
answers identical to llama-server plain's. Ratios are to llama-server plain. Every server request
is greedy (temperature 0), without prompt caching, one slot, CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from homespec.bench.llamaserver import identical, run_server, table  # noqa: E402


def default_server() -> Path:
    """Where scripts/build_llamacpp_tools.sh leaves llama-server (the last line it prints), building it first."""
    out = subprocess.run(["bash", str(ROOT / "scripts" / "build_llamacpp_tools.sh")], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"error: building llama-server failed:\n{out.stderr[-2000:]}")
    return Path(out.stdout.strip().splitlines()[-1]) / "llama-server"


def run_homespec(model: str, draft: str, prompts: list[list[int]], n: int, ctx: int, threads: int,
                 guard: bool, methods: list[str], depth: int | None, topk: int | None, nodes: int | None) -> dict[str, Any]:
    from homespec.bench.run import run_bench
    from homespec.cli.options import RunArgs

    opts = RunArgs(model=model, draft=draft, method=methods[0], ctx=ctx, draft_depth=depth, draft_topk=topk,
                   draft_tokens=nodes, threads=threads, guard=guard).options()
    res = run_bench(opts, methods, prompts, max_tokens=n)
    out = {}
    for name, s in res.methods.items():
        out[name] = {"tokens": s.tokens, "decode_s": s.decode_s, "tokens_per_s": s.tokens_per_s,
                     "tokens_per_pass": s.tokens / s.passes if s.passes else None, "passes": s.passes,
                     "spec_tau": s.spec_tau, "outputs": [list(o) for o in s.outputs]}
    return out


def _named(rows: dict[str, dict[str, Any]], names: dict[str, str]) -> dict[str, dict[str, Any]]:
    return {names[k]: v for k, v in rows.items()}


def run_rounds(groups: list[Any], rounds: int) -> dict[str, dict[str, Any]]:
    """Every group once per round, in reversed order every other round (A B C, C B A, ...): a drift
    of the machine's speed over the run then weighs on every method alike. A method's figures
    are its totals over the rounds; its outputs, the first round's (greedy: every round's are equal)."""
    total: dict[str, dict[str, Any]] = {}
    for r in range(rounds):
        for group in (groups if r % 2 == 0 else list(reversed(groups))):
            for name, row in group().items():
                t = total.setdefault(name, {**row, "tokens": 0, "decode_s": 0.0, "passes": 0, "rounds_tokens_per_s": []})
                t["tokens"] += row["tokens"]
                t["decode_s"] += row["decode_s"]
                t["passes"] += row["passes"] or 0
                t["rounds_tokens_per_s"].append(round(row["tokens_per_s"], 3))
    order = [n for n in ("llama-server plain", "llama-server eagle3") if n in total] + \
            [n for n in total if not n.startswith("llama-server")]
    out = {}
    for name in order:
        t = total[name]
        t["tokens_per_s"] = t["tokens"] / t["decode_s"] if t["decode_s"] else 0.0
        t["tokens_per_pass"] = t["tokens"] / t["passes"] if t["passes"] else None
        out[name] = t
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draft-gguf", default=None, help="the head exported with `homespec draft export`")
    ap.add_argument("--draft", default=None, help="the same head for homespec (an EAGLE-3 layout directory)")
    ap.add_argument("--plain-only", action="store_true", help="only llama-server plain and homespec none (no head)")
    ap.add_argument("--model", default=None, help="target GGUF (default: the embedded SmolLM2)")
    ap.add_argument("--server", default=None, help="llama-server binary (default: build_llamacpp_tools.sh's)")
    ap.add_argument("--limit", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--spec-n-max", type=int, default=4, help="llama-server --spec-draft-n-max (chain length)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds over all methods, order reversed every other round")
    ap.add_argument("--also-draft", default=None, help="another head for homespec alone (e.g. the EAGLE-3.1 head the twin came from)")
    ap.add_argument("--json-out", default=None)
    ap.add_argument("--markdown", default=None)
    a = ap.parse_args()
    if not a.plain_only and not (a.draft_gguf and a.draft):
        ap.error("--draft-gguf and --draft are needed (or --plain-only)")

    from homespec.backends.tokenizer import load_tokenizer
    from homespec.embedded import smollm2_path
    from homespec.promptsets import load_prompts
    from homespec.session.encode import encode_prompt

    model = a.model or str(smollm2_path())
    binary = Path(a.server) if a.server else default_server()
    tok = load_tokenizer(model)
    prompts = [encode_prompt(tok, list(i.turns[:1]), chat=True) for i in load_prompts("test")[: a.limit]]
    logs = Path(a.json_out or "bench").with_suffix("")
    spec = ["--spec-type", "draft-eagle3", "--spec-draft-model", a.draft_gguf, "--spec-draft-n-max", str(a.spec_n_max),
            "--spec-draft-p-min", "0"]
    k = a.spec_n_max
    groups = [
        lambda: {"llama-server plain": run_server(binary, model, prompts, a.max_tokens, [], a.ctx, a.threads,
                                                  Path(f"{logs}.server-plain.log"))},
        lambda: {"llama-server eagle3": run_server(binary, model, prompts, a.max_tokens, spec, a.ctx, a.threads,
                                                   Path(f"{logs}.server-eagle3.log"))},
        lambda: _named(run_homespec(model, a.draft, prompts, a.max_tokens, a.ctx, a.threads, True, ["none", "eagle3"],
                                    None, None, None), {"none": "homespec none", "eagle3": "homespec eagle3 (guard)"}),
        lambda: _named(run_homespec(model, a.draft, prompts, a.max_tokens, a.ctx, a.threads, False, ["eagle3"],
                                    k, 1, k + 1), {"eagle3": f"homespec eagle3 (forced, chain {k})"}),
    ]
    if a.plain_only:
        groups = [groups[0], lambda: _named(run_homespec(model, None, prompts, a.max_tokens, a.ctx, a.threads, True,
                                                         ["none"], None, None, None), {"none": "homespec none"})]
    elif a.also_draft:
        groups += [
            lambda: _named(run_homespec(model, a.also_draft, prompts, a.max_tokens, a.ctx, a.threads, True, ["eagle3"],
                                        None, None, None), {"eagle3": "homespec eagle3, --also-draft head (guard)"}),
            lambda: _named(run_homespec(model, a.also_draft, prompts, a.max_tokens, a.ctx, a.threads, False, ["eagle3"],
                                        k, 1, k + 1), {"eagle3": f"homespec eagle3, --also-draft head (forced, chain {k})"}),
        ]
    rows = run_rounds(groups, a.rounds)
    ref = rows["llama-server plain"]["outputs"]
    for r in rows.values():
        r["identical_to_llama_server_plain"] = identical(r["outputs"], ref)
    result = {"model": model, "draft": a.draft, "draft_gguf": a.draft_gguf, "prompts": len(prompts),
              "max_tokens": a.max_tokens, "threads": a.threads, "ctx": a.ctx, "spec_n_max": a.spec_n_max,
              "rounds": a.rounds,
              "server": str(binary), "methods": rows}
    md = table(rows)
    print(md)
    if a.json_out:
        Path(a.json_out).write_text(json.dumps(result, indent=1) + "\n")
    if a.markdown:
        Path(a.markdown).write_text(md)


if __name__ == "__main__":
    main()
