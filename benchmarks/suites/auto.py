"""`--method auto` against plain decoding and each forced method, side by side on this machine.

    python -m benchmarks auto [--edit 30] [--chat 20] [--tokens 128] [--rounds 3]
        [--threads 2] [--only edit,chat,serve] [--json FILE]

Four measurements, each a ratio taken in one run (SmolLM2 Q4_1 on llama.cpp, greedy, the guard on
as the CLI has it; every answer from an empty cache):

  edit    homespec's edit set (edit.jsonl: add types, rename, fix a bug, refactor, rewrite; the first
          --edit prompts): none, ngram, suffix, eagle3 and auto in lockstep (each on its own target,
          a step of each in turn, the order reversed every turn, so a machine whose speed drifts slows
          all alike). Per method: total tokens over total decode time; auto over none, and auto over
          the best forced method; per category (bench's by_category).
  chat    the test set's chat prompts (the first --chat): none and auto, in lockstep.
  greedy  from the same runs: auto's answers against none's, token for token; an answer that differs
          must part at a near-tie of the target scored alone (top-2 logits within 1.6, the batched
          kernels' noise floor, docs/backends.md) to count as within the floor.
  serve   two servers (auto, none), 4 slots each; per round 4 concurrent clients, two sending edit
          prompts and two chat prompts (--per-client each; prompts no earlier round sent, so no
          answer is copied whole from the suffix store), to one server then the other (the order
          alternating by round): total tokens over the round's wall time; auto's /metrics counters
          per drafter.

One row per measurement (edit, chat, serve: bench's JSON summary or the serve rounds); the ratios are
the summary's; prints the summary.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import threading
import time

from benchmarks.harness import RUNS, Proc, add_rounds, add_threads, free_port
from benchmarks.results import Result
from benchmarks.suites.serve import complete
from homespec.engine.options import RunOptions

NEAR_TIE = 1.6
FORCED = ("ngram", "suffix", "eagle3")


def items(split: str, category: str | None, limit: int):
    from homespec.promptsets import load_prompts

    return [i for i in load_prompts(split) if category is None or i.category == category][:limit]


def lockstep_bench(prompt_items, methods, a) -> dict:
    """bench --lockstep over the items -> bench's JSON summary."""
    from homespec.bench.run import run_bench, summary
    from homespec.engine.options import draft_shape
    from homespec.session.encode import prompt_tokens

    depth, topk, nodes = draft_shape("llamacpp", None, None, None, None)  # the CLI's: a chain of 4 on a CPU
    opts = RunOptions(method=methods[0], guard=True, threads=a.threads, ctx=2048, draft_depth=depth, draft_topk=topk,
                      draft_tokens=nodes)

    def token_prompts(session):
        return [prompt_tokens(session, list(i.turns[:1]), True) for i in prompt_items]

    def tick(method, done, total):
        print(f"  {done}/{total} {method}", file=sys.stderr, flush=True)

    res = run_bench(opts, list(methods), token_prompts, max_tokens=a.tokens, progress=tick, lockstep=True,
                    categories=[i.category for i in prompt_items])
    out = summary(res)
    out["outputs"] = {m: s.outputs for m, s in res.methods.items()}
    out["prompts"] = [i.id for i in prompt_items]
    return out


def greedy_check(bench: dict, prompt_items, a) -> dict:
    """auto's answers against none's: identical, or parting at a near-tie of the target."""
    from homespec.backends.llamacpp.backend import LlamaCppBackend
    from homespec.backends.settings import BackendSettings
    from homespec.embedded import smollm2_path
    from homespec.session.encode import encode_prompt

    ref, got = bench["outputs"]["none"], bench["outputs"]["auto"]
    same, near, far = 0, 0, []
    with LlamaCppBackend(str(smollm2_path()), BackendSettings(n_ctx=2048, n_ubatch=32, n_threads=a.threads or 2)) as b:
        for item, r, g in zip(prompt_items, ref, got):
            if r == g:
                same += 1
                continue
            k = next((i for i, (x, y) in enumerate(zip(r, g)) if x != y), min(len(r), len(g)))
            ids = encode_prompt(b.tokenizer, list(item.turns[:1]), True)
            top2 = b.score(list(ids) + list(r[:k]))[-1].topk(2).values
            gap = float(top2[0] - top2[1])
            near += gap < NEAR_TIE
            if gap >= NEAR_TIE:
                far.append({"prompt": item.id, "token": k, "gap": round(gap, 3)})
    return {"answers": len(ref), "identical": same, "parting_at_a_near_tie": near, "beyond_the_floor": far}


def ratios(bench: dict) -> dict:
    m = bench["methods"]
    rate = {name: v["tokens_per_s"] for name, v in m.items()}
    forced = {k: rate[k] for k in FORCED if k in rate}
    best = max(forced, key=forced.get) if forced else None
    return {"tokens_per_s": rate, "auto_over_none": round(rate["auto"] / rate["none"], 4),
            "best_forced": best, "auto_over_best_forced": round(rate["auto"] / forced[best], 4) if best else None,
            "drafters": m["auto"]["drafters"],
            "by_category": {c["category"]: {k: v["speedup"] for k, v in c["methods"].items()}
                            for c in bench["by_category"]}}


def drafter_counters(port: int) -> dict:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict[str, dict[str, float]] = {}
    for name, drafter, value in re.findall(
            r'^homespec:spec_decode_(num_\w+?)_by_drafter_total\{[^}]*drafter="([^"]+)"[^}]*\} ([0-9.e+]+)$', text, re.M):
        out.setdefault(drafter, {})[name] = float(value)
    return out


def serve_round(port: int, edit_ids, chat_ids, tokens: int) -> dict:
    """Four concurrent clients, two editing and two chatting, each sending its prompts in turn."""
    lists = [edit_ids[0::2], edit_ids[1::2], chat_ids[0::2], chat_ids[1::2]]
    done: list[int] = []
    lock = threading.Lock()

    def client(prompts) -> None:
        for p in prompts:
            n = complete(port, p, tokens)[2]
            with lock:
                done.append(n)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(ps,), daemon=True) for ps in lists]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.5)
    wall = time.perf_counter() - t0
    return {"tokens": sum(done), "wall_s": round(wall, 3), "tok_s": round(sum(done) / wall, 3)}


def serve_bench(a) -> dict:
    from homespec.backends.tokenizer import load_tokenizer
    from homespec.embedded import smollm2_path
    from homespec.session.encode import encode_prompt

    tok = load_tokenizer(str(smollm2_path()))
    # each round sends prompts no earlier round sent (the same to both servers): a repeated greedy
    # answer would be copied whole from the suffix store, which measures the store, not the choice
    n = 2 * a.per_client * a.rounds
    code = [i for i in items("edit", None, 100) if i.category != "rewrite"]  # the editing clients edit code
    edit_ids = [encode_prompt(tok, list(i.turns[:1]), True) for i in code[-n:]]
    chat_ids = [encode_prompt(tok, list(i.turns[:1]), True) for i in items("test", "chat", 100)[-n:]]
    if len(edit_ids) < n or len(chat_ids) < n:
        raise SystemExit(f"error: {a.rounds} rounds need {n} code and {n} chat prompts; hint: lower --rounds")
    logs = RUNS / "auto-serve-logs"
    logs.mkdir(parents=True, exist_ok=True)
    procs = {}
    for method in ("auto", "none"):
        port = free_port()
        cmd = [sys.executable, "-m", "homespec", "serve", "--port", str(port), "--parallel", "4", "--ctx", "1024",
               "--method", method, "--no-cache-prompt"] + (["--threads", str(a.threads)] if a.threads else [])
        procs[method] = Proc(method, cmd, port, logs / f"{method}.log")
    try:
        for p in procs.values():
            p.wait_ready()
        runs: dict[str, list[dict]] = {"auto": [], "none": []}
        for r in range(a.rounds):
            for method in (("auto", "none") if r % 2 == 0 else ("none", "auto")):
                k = slice(r * n // a.rounds, (r + 1) * n // a.rounds)
                runs[method].append(serve_round(procs[method].port, edit_ids[k], chat_ids[k], a.tokens))
                print(f"  serve round {r + 1}: {method} {runs[method][-1]['tok_s']} tok/s", file=sys.stderr, flush=True)
        counters = drafter_counters(procs["auto"].port)
    finally:
        for p in procs.values():
            p.stop()
    paired = [x["tok_s"] / y["tok_s"] for x, y in zip(runs["auto"], runs["none"])]
    total = {m: sum(x["tokens"] for x in v) / sum(x["wall_s"] for x in v) for m, v in runs.items()}
    return {"rounds": runs, "auto_over_none": round(total["auto"] / total["none"], 4),
            "round_ratios": [round(x, 4) for x in paired], "median_round_ratio": round(statistics.median(paired), 4),
            "drafter_counters": counters, "clients": "2 editing code (edit.jsonl, the last prompts) + 2 chatting (test.jsonl chat, the last); new prompts each round",
            "requests_per_client": a.per_client}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--edit", type=int, default=30, help="edit prompts (the first N of edit.jsonl)")
    p.add_argument("--chat", type=int, default=20, help="chat prompts (the first N of test.jsonl's chat)")
    p.add_argument("--tokens", type=int, default=128)
    add_rounds(p, 4)
    p.add_argument("--per-client", type=int, default=2, help="serve: requests each client sends per round")
    add_threads(p, 2)
    p.add_argument("--only", default="edit,chat,serve")


def run(a: argparse.Namespace) -> Result:
    todo = set(a.only.split(","))
    summary: dict = {}
    rows: list[dict] = []
    if "edit" in todo:
        edit_items = items("edit", None, a.edit)
        edit = lockstep_bench(edit_items, ("none", *FORCED, "auto"), a)
        edit["greedy"] = greedy_check(edit, edit_items, a)
        rows.append({"part": "edit", **edit})
        summary["edit"] = ratios(edit) | {"greedy": edit["greedy"], "prompts": len(edit_items)}
    if "chat" in todo:
        chat_items = items("test", "chat", a.chat)
        chat = lockstep_bench(chat_items, ("none", "auto"), a)
        chat["greedy"] = greedy_check(chat, chat_items, a)
        rows.append({"part": "chat", **chat})
        summary["chat"] = ratios(chat) | {"greedy": chat["greedy"], "prompts": len(chat_items)}
    if "serve" in todo:
        serve = serve_bench(a)
        rows.append({"part": "serve", **serve})
        summary["serve"] = {k: serve[k] for k in ("auto_over_none", "round_ratios", "median_round_ratio",
                                                    "drafter_counters")}
    summary["settings"] = {"tokens": a.tokens, "threads": a.threads, "model": "embedded SmolLM2-135M-Instruct Q4_1"}
    print(json.dumps(summary, indent=1))
    figures = {f"{part}_{k}": v for part, s in summary.items() if part != "settings"
               for k, v in s.items() if k in ("auto_over_none", "auto_over_best_forced", "median_round_ratio")}
    return Result(rows=rows, ratios=figures, detail=summary)

