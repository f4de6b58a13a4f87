"""The batched engine at concurrency 1, 2, 4, 8 on SmolLM2: speculation on (eagle3 under the batch
guard) against off (method none), measured side by side in one run on the same prompts.

    python -m benchmarks engine [--concurrency 1,2,4,8] [--tokens 32] [--rounds 2] [--json FILE]

Both engines are loaded at once (an idle engine's thread waits, costing nothing); for each
concurrency the two run in turn, `--rounds` times alternating (off, on, on, off, ...), each a fixed
set of requests (2 x concurrency, at least 4) from homespec's own test prompts, `concurrency`
clients at a time. Per run: total tokens/s (every answer's tokens over the wall time), per-user
tokens/s (each answer's tokens after the first over its time after the first), p50/p95 time to
first token. Printed: the medians over rounds and the ratios spec-on / spec-off per concurrency and
concurrency 4 / concurrency 1 total tokens/s. Stops by itself.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

from benchmarks.harness import add_rounds, add_threads, alternate
from benchmarks.results import Result


def run_clients(engine, prompts, concurrency: int, tokens: int, speculate: bool) -> dict:
    """`concurrency` clients take the prompts in turn; -> the run's figures."""
    from homespec.engine.api import EngineRequest
    from homespec.engine.responses import Finish, StepFigures

    todo = list(enumerate(prompts))
    lock = threading.Lock()
    results: list[tuple[float, float, float, int]] = []  # (ttft, decode seconds, total seconds, tokens)

    def client() -> None:
        while True:
            with lock:
                if not todo:
                    return
                _, p = todo.pop(0)
            t0 = time.perf_counter()
            h = engine.submit(EngineRequest(prompt_ids=tuple(p), max_tokens=tokens, speculate=speculate))
            first = None
            n = 0
            for r in h:
                if isinstance(r, StepFigures) and first is None:
                    first = time.perf_counter()
                if isinstance(r, Finish):
                    n = len(r.token_ids)
            end = time.perf_counter()
            with lock:
                results.append((first - t0, end - first, end - t0, n))

    before = engine.stats()
    t0 = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    after = engine.stats()
    ttft = sorted(r[0] for r in results)
    per_user = [(r[3] - 1) / r[1] for r in results if r[3] > 1 and r[1] > 0]
    return {
        "requests": len(results), "tokens": sum(r[3] for r in results), "wall_s": round(wall, 3),
        "total_tok_s": round(sum(r[3] for r in results) / wall, 3),
        "per_user_tok_s": round(statistics.mean(per_user), 3) if per_user else 0.0,
        "ttft_p50_s": round(_pct(ttft, 50), 4), "ttft_p95_s": round(_pct(ttft, 95), 4),
        "passes": after.target_passes_total - before.target_passes_total,
        "drafts": after.spec_num_drafts - before.spec_num_drafts,
        "draft_tokens": after.spec_num_draft_tokens - before.spec_num_draft_tokens,
        "accepted_tokens": after.spec_num_accepted_tokens - before.spec_num_accepted_tokens,
    }


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return 0.0
    k = min(len(xs) - 1, max(0, round(q / 100 * (len(xs) - 1))))
    return xs[k]


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--concurrency", default="1,2,4,8")
    ap.add_argument("--tokens", type=int, default=32)
    add_rounds(ap, 2)
    ap.add_argument("--ctx", type=int, default=512)
    add_threads(ap)


def run(a: argparse.Namespace) -> Result:
    levels = [int(c) for c in a.concurrency.split(",")]

    from homespec.engine.core import Engine
    from homespec.promptsets import load_prompts
    from homespec.engine.options import RunOptions
    from homespec.session.encode import encode_prompt

    par = max(levels)
    base = dict(ctx=a.ctx, threads=a.threads, draft_depth=4, draft_topk=1, draft_tokens=5)  # the CPU draft shape
    # each answer from an empty cache: the bench measures decoding, not prompt reuse
    off = Engine.open(RunOptions(method="none", **base), parallel=par, queue_size=par, cache_prompt=False).start()
    on = Engine.open(RunOptions(method="eagle3", guard=True, **base), parallel=par, queue_size=par,
                     cache_prompt=False).start()
    ids = [encode_prompt(off.tokenizer, p.turns, True) for p in load_prompts("test")]
    pool = [p for p in ids if 24 <= len(p) <= 96]
    out: dict = {"tokens": a.tokens, "rounds": a.rounds, "ctx": a.ctx, "threads": a.threads, "levels": {}}
    try:
        for c in levels:
            prompts = pool[: max(4, 2 * c)]

            def arm(name: str, eng, spec: bool, c: int = c, prompts: list = prompts) -> dict:
                r = run_clients(eng, prompts, c, a.tokens, spec)
                print(f"c={c} {name}: {r}", flush=True)
                return r

            runs = alternate({"off": lambda: arm("off", off, False), "on": lambda: arm("on", on, True)}, a.rounds)
            out["levels"][c] = {k: {"runs": v, "median_total_tok_s": statistics.median(r["total_tok_s"] for r in v)}
                                for k, v in runs.items()}
        out["guard"] = on.guard.as_json() if on.guard is not None else None
    finally:
        off.close()
        on.close()
    report(out, levels)
    rows = [{"concurrency": c, "speculation": k, "round": i + 1, **r}
            for c, lv in out["levels"].items() for k in ("off", "on") for i, r in enumerate(lv[k]["runs"])]
    ratios = {f"on_over_off_c{c}": out["levels"][c]["ratio_on_off"] for c in levels}
    ratios |= {k: v for k, v in out.items() if k.startswith("c4_over_c1_")}
    detail = {k: v for k, v in out.items() if k != "levels" and not k.startswith("c4_over_c1_")}
    detail["median_total_tok_s"] = {c: {k: lv[k]["median_total_tok_s"] for k in ("off", "on")} for c, lv in out["levels"].items()}
    return Result(rows=rows, ratios=ratios, detail=detail)


def report(out: dict, levels: list[int]) -> None:
    print(f"{'conc':>4} {'off tok/s':>10} {'on tok/s':>10} {'on/off':>7} {'per-user off/on':>16} {'ttft p50 off/on':>16} drafts")
    for c in levels:
        lv = out["levels"][c]
        m_off, m_on = lv["off"]["median_total_tok_s"], lv["on"]["median_total_tok_s"]
        pu = [statistics.median(r["per_user_tok_s"] for r in lv[k]["runs"]) for k in ("off", "on")]
        tt = [statistics.median(r["ttft_p50_s"] for r in lv[k]["runs"]) for k in ("off", "on")]
        drafts = sum(r["drafts"] for r in lv["on"]["runs"])
        lv["ratio_on_off"] = round(m_on / m_off, 3) if m_off else None
        print(f"{c:>4} {m_off:>10.2f} {m_on:>10.2f} {lv['ratio_on_off']:>7.3f} {pu[0]:>7.2f}/{pu[1]:<8.2f} "
              f"{tt[0]:>7.3f}/{tt[1]:<8.3f} {drafts}")
    if 1 in out["levels"] and 4 in out["levels"]:
        for k in ("off", "on"):
            r = out["levels"][4][k]["median_total_tok_s"] / out["levels"][1][k]["median_total_tok_s"]
            out[f"c4_over_c1_{k}"] = round(r, 3)
            print(f"concurrency 4 / concurrency 1 total tokens/s, speculation {k}: {r:.2f}x")

