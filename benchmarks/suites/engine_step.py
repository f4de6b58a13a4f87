"""Where a batched engine step's time goes: the step's wall time against the time inside
llama_decode, plain decoding (method none) on SmolLM2, at each concurrency.

    python -m benchmarks engine_step [--concurrency 1,8] [--tokens 48] [--rounds 2] [--threads 1]

Per run: total tokens/s, engine steps, and per step the wall time of Engine.step, the
seconds inside llama_decode, and the difference (the engine's own per-step cost: batch building,
verification, commit, detokenising, handing responses to the consumers). Also prints a hash of
the greedy token ids of 8 requests, so two checkouts can be compared for identical answers. Run
it in two checkouts back to back to compare them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time

from benchmarks.harness import add_rounds, add_threads
from benchmarks.results import Result
from benchmarks.suites.engine import run_clients


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--concurrency", default="1,8")
    ap.add_argument("--tokens", type=int, default=48)
    add_rounds(ap, 2)
    add_threads(ap, 1)


def run(a: argparse.Namespace) -> Result:
    from homespec.engine.api import EngineRequest
    from homespec.engine.core import Engine
    from homespec.promptsets import load_prompts
    from homespec.engine.options import RunOptions
    from homespec.session.encode import encode_prompt
    from homespec.engine.responses import final

    levels = [int(c) for c in a.concurrency.split(",")]
    acc = {"step": 0.0, "decode": 0.0, "n": 0}
    engine = Engine.open(RunOptions(method="none", ctx=512, threads=a.threads), parallel=max(levels),
                         queue_size=max(levels), cache_prompt=False)
    _time_steps(engine, acc)
    engine.start()
    ids = [encode_prompt(engine.tokenizer, p.turns, True) for p in load_prompts("test")]
    pool = [p for p in ids if 24 <= len(p) <= 96]
    rows = []
    try:
        answers = [final(engine.submit(EngineRequest(prompt_ids=tuple(p), max_tokens=24))).token_ids for p in pool[:8]]
        answers_hash = hashlib.sha1(json.dumps(answers).encode()).hexdigest()[:12]
        print("greedy ids hash", answers_hash)
        for c in levels:
            for _ in range(a.rounds):
                acc.update(step=0.0, decode=0.0, n=0)
                r = run_clients(engine, pool[: max(4, 2 * c)], c, a.tokens, False)
                n, own = acc["n"], acc["step"] - acc["decode"]
                print(f"c={c} total {r['total_tok_s']:.1f} tok/s, {n} steps; per step {acc['step'] / n * 1e3:.2f} ms, "
                      f"llama_decode {acc['decode'] / n * 1e3:.2f} ms, engine {own / n * 1e3:.2f} ms "
                      f"({own / acc['step'] * 100:.1f} %)", flush=True)
                rows.append({"concurrency": c, "total_tok_s": r["total_tok_s"], "steps": n,
                             "step_ms": acc["step"] / n * 1e3, "decode_ms": acc["decode"] / n * 1e3, "engine_ms": own / n * 1e3})
    finally:
        engine.close()
    return Result(rows=rows, detail={"tokens": a.tokens, "threads": a.threads, "greedy_ids_hash": answers_hash})


def _time_steps(engine, acc: dict) -> None:
    """Wrap this engine's step and its llama_decode with timers adding into `acc`."""
    step, ll = engine.step, engine.target._ll
    decode = ll.llama_decode

    def timed_step() -> None:
        t = time.perf_counter()
        step()
        acc["step"] += time.perf_counter() - t
        acc["n"] += 1

    def timed_decode(ctx, batch):
        t = time.perf_counter()
        rc = decode(ctx, batch)
        acc["decode"] += time.perf_counter() - t
        return rc

    engine.step = timed_step
    ll.llama_decode = timed_decode

