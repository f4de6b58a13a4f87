"""homespec beside llama.cpp's own server: the same prompts, target and head, side by side in one run.

    python -m benchmarks llamacpp --draft-gguf TWIN.gguf --draft HEAD_DIR [--limit 8] [--max-tokens 64]
           [--server BIN] [--groups LIST] [--rounds N] [--json FILE] [--markdown FILE]
    python -m benchmarks llamacpp --plain-only [...]      llama-server plain and homespec none alone

Methods, each over homespec's held-out test prompts (chat template, the same token ids for all), run in
groups (`--groups`, a comma list; default server-plain,server-eagle3,none-eagle3,chain):
  server-plain    llama-server plain: the server binary of scripts/build_llamacpp_tools.sh (or --server)
  server-eagle3   llama-server `--spec-type draft-eagle3 --spec-draft-model TWIN.gguf`, a chain of --spec-n-max
  none            homespec none alone (no head needed; --plain-only = server-plain,none)
  none-eagle3     homespec none and eagle3 with the guard (its default shape here)
  none-auto       homespec none and auto (the default method, the guard on)
  chain           homespec eagle3 forced (--no-guard), a chain of --spec-n-max
  tree            homespec eagle3 forced (--no-guard), the 6-deep, 8-wide tree of 48 nodes
Per method: tokens/s (decode only: llama-server's timings `predicted_per_second`, homespec's decode
seconds), tokens per target pass (llama-server: predicted_n / (predicted_n - draft_n_accepted), one
target pass per verification step; homespec: tokens / target passes), and the fractions of greedy
answers identical to llama-server plain's and to homespec none's. Ratios are to llama-server plain.
Every server request is greedy (temperature 0), without prompt caching, one slot; the server places
layers as its defaults do (all on a GPU that holds them), homespec as its planner does.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks.harness import ROOT, RUNS, add_model, add_rounds, add_threads, llama_server, smollm2, usage_error
from benchmarks.results import Result
from homespec.bench.llamaserver import identical, run_server, table


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


GROUPS = ("server-plain", "server-eagle3", "none", "none-eagle3", "none-auto", "chain", "tree")
NO_HEAD = ("server-plain", "none")
TREE = (6, 8, 48)  # the planner's default tree on a GPU: depth, top-k, nodes


def _group_names(text: str) -> list[str]:
    names = [g.strip() for g in text.split(",") if g.strip()]
    bad = [g for g in names if g not in GROUPS]
    if bad or not names:
        sys.exit(f"error: unknown group(s) {', '.join(bad) or '(none)'}\nhint: --groups takes a comma list of: {', '.join(GROUPS)}")
    return names


def _guarded(name: str, group: Any) -> Any:
    """`group`, with a failure recorded as a row of its own (no tokens, the error) instead of raised."""
    def run() -> dict[str, dict[str, Any]]:
        try:
            return group()
        except Exception as e:  # noqa: BLE001 - the error is the row's content
            print(f"warning: group {name} failed: {type(e).__name__}: {e}", file=sys.stderr)
            return {f"{name} (failed)": {"error": f"{type(e).__name__}: {e}", "tokens": 0, "decode_s": 0.0, "passes": 0,
                                         "tokens_per_s": 0.0, "tokens_per_pass": None, "outputs": []}}
    return run


def make_group(name: str, a: Any, binary: Path | None, model: str, prompts: list[list[int]], spec: list[str],
               logs: Path) -> Any:
    """The callable that runs group `name` once and returns its rows."""
    k = a.spec_n_max
    home = lambda guard, methods, depth, topk, nodes: run_homespec(  # noqa: E731
        model, a.draft, prompts, a.max_tokens, a.ctx, a.threads, guard, methods, depth, topk, nodes)
    return {
        "server-plain": lambda: {"llama-server plain": run_server(binary, model, prompts, a.max_tokens, [], a.ctx,
                                                                  a.threads, Path(f"{logs}.server-plain.log"))},
        "server-eagle3": lambda: {"llama-server eagle3": run_server(binary, model, prompts, a.max_tokens, spec, a.ctx,
                                                                    a.threads, Path(f"{logs}.server-eagle3.log"))},
        "none": lambda: _named(run_homespec(model, None, prompts, a.max_tokens, a.ctx, a.threads, True, ["none"],
                                            None, None, None), {"none": "homespec none"}),
        "none-eagle3": lambda: _named(home(True, ["none", "eagle3"], None, None, None),
                                      {"none": "homespec none", "eagle3": "homespec eagle3 (guard)"}),
        "none-auto": lambda: _named(home(True, ["none", "auto"], None, None, None),
                                    {"none": "homespec none", "auto": "homespec auto"}),
        "chain": lambda: _named(home(False, ["eagle3"], k, 1, k + 1), {"eagle3": f"homespec eagle3 (forced, chain {k})"}),
        "tree": lambda: _named(home(False, ["eagle3"], *TREE), {"eagle3": "homespec eagle3 (forced, tree {}/{}/{})".format(*TREE)}),
    }[name]


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--draft-gguf", default=None, help="the head exported with `homespec draft export`")
    ap.add_argument("--draft", default=None, help="the same head for homespec (an EAGLE-3 layout directory)")
    ap.add_argument("--plain-only", action="store_true", help="only llama-server plain and homespec none (no head)")
    add_model(ap, "target GGUF (default: the embedded SmolLM2)")
    ap.add_argument("--server", default=None, help="llama-server binary (default: build_llamacpp_tools.sh's)")
    ap.add_argument("--limit", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--ctx", type=int, default=2048)
    add_threads(ap, os.cpu_count() or 1)
    ap.add_argument("--spec-n-max", type=int, default=4, help="llama-server --spec-draft-n-max (chain length)")
    add_rounds(ap, 2)
    ap.add_argument("--also-draft", default=None, help="another head for homespec alone (e.g. the EAGLE-3.1 head the twin came from)")
    ap.add_argument("--groups", default="server-plain,server-eagle3,none-eagle3,chain",
                    help=f"comma list of: {', '.join(GROUPS)}")
    ap.add_argument("--keep-going", action="store_true",
                    help="a group that fails is recorded with its error and the others run on")
    ap.add_argument("--markdown", default=None)


def run(a: argparse.Namespace) -> Result:
    if a.plain_only:
        a.groups = "server-plain,none"
    if any(g not in NO_HEAD for g in _group_names(a.groups)) and not (a.draft_gguf and a.draft):
        usage_error("these groups run the head: --draft-gguf and --draft are needed", "pass both, or --plain-only")

    from homespec.backends.tokenizer import load_tokenizer
    from homespec.promptsets import load_prompts
    from homespec.session.encode import encode_prompt

    model = a.model or str(smollm2())
    wanted = _group_names(a.groups)
    binary = (llama_server(a.server) if a.server else default_server()) if any(g.startswith("server-") for g in wanted) else None
    tok = load_tokenizer(model)
    prompts = [encode_prompt(tok, list(i.turns[:1]), chat=True) for i in load_prompts("test")[: a.limit]]
    logs = Path(a.json or RUNS / "llamacpp").with_suffix("")  # the servers' logs
    logs.parent.mkdir(parents=True, exist_ok=True)
    spec = ["--spec-type", "draft-eagle3", "--spec-draft-model", a.draft_gguf, "--spec-draft-n-max", str(a.spec_n_max),
            "--spec-draft-p-min", "0"]
    groups = [make_group(g, a, binary, model, prompts, spec, logs) for g in wanted]
    if a.keep_going:
        groups = [_guarded(name, g) for name, g in zip(wanted, groups)]
    if a.also_draft:
        k = a.spec_n_max
        groups += [
            lambda: _named(run_homespec(model, a.also_draft, prompts, a.max_tokens, a.ctx, a.threads, True, ["eagle3"],
                                        None, None, None), {"eagle3": "homespec eagle3, --also-draft head (guard)"}),
            lambda: _named(run_homespec(model, a.also_draft, prompts, a.max_tokens, a.ctx, a.threads, False, ["eagle3"],
                                        k, 1, k + 1), {"eagle3": f"homespec eagle3, --also-draft head (forced, chain {k})"}),
        ]
    rows = run_rounds(groups, a.rounds)
    for key, name in (("identical_to_llama_server_plain", "llama-server plain"), ("identical_to_homespec_none", "homespec none")):
        if name in rows:
            for r in rows.values():
                r[key] = identical(r["outputs"], rows[name]["outputs"])
    detail = {"model": model, "draft": a.draft, "draft_gguf": a.draft_gguf, "prompts": len(prompts),
              "max_tokens": a.max_tokens, "threads": a.threads, "ctx": a.ctx, "spec_n_max": a.spec_n_max,
              "rounds": a.rounds, "groups": _group_names(a.groups), "server": str(binary) if binary else None}
    md = table(rows) if "llama-server plain" in rows else ""
    print(md or "\n".join(f"{n}: {r['tokens_per_s']:.1f} tokens/s" for n, r in rows.items()))
    if a.markdown:
        Path(a.markdown).write_text(md)
    base = (rows.get("llama-server plain") or {}).get("tokens_per_s")
    ratios = {n: round(r["tokens_per_s"] / base, 3) for n, r in rows.items() if base and r.get("tokens_per_s")}
    return Result(rows=[{"method": n, **r} for n, r in rows.items()], ratios=ratios, detail=detail)
