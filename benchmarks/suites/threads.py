"""Decode speed with the thread count measured per decode (the default) and held at --threads,
side by side in alternating rounds on the same loaded backend (backends/llamacpp/threads.py).

    .venv/bin/python -m benchmarks threads [--threads 2] [--rounds 6] [--tokens 48] [--json FILE]

Each round: the same prompt prefilled and --tokens greedy tokens decoded one by one, once held and
once measured; reported per round and as medians, with the load average: run it while the cores
are busy with other work and again while they are idle.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from benchmarks.harness import add_rounds, smollm2
from benchmarks.results import Result

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle. " * 6


def decode_rate(backend, prompt: list[int], n: int) -> float:
    """Tokens per second of n one-token greedy steps after the prompt."""
    backend.reset()
    token = int(backend.prefill(prompt).logits[-1].argmax())
    t0 = time.perf_counter()
    for _ in range(n):
        fwd = backend.verify([token], [-1])
        backend.commit([0])
        token = int(fwd.logits[0].argmax())
    return n / (time.perf_counter() - t0)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--threads", type=int, default=2, help="the count held, and the most the measured one uses")
    add_rounds(ap, 6)
    ap.add_argument("--tokens", type=int, default=48, help="greedy tokens decoded per round and arm")


def run(a: argparse.Namespace) -> Result:
    from homespec.backends.llamacpp.backend import LlamaCppBackend
    from homespec.backends.llamacpp.threads import ThreadTuner
    from homespec.backends.settings import BackendSettings

    backend = LlamaCppBackend(smollm2(), BackendSettings(n_ctx=1024, n_threads=a.threads))
    prompt = backend.tokenizer.encode(PROMPT, add_bos=True)
    measured = ThreadTuner(a.threads)  # kept across rounds, as a server keeps it
    rows = []
    try:
        for r in range(a.rounds):
            row = {"round": r + 1, "load": round(os.getloadavg()[0], 1)}
            for name, tuner in (("held", ThreadTuner(a.threads, fixed=True)), ("measured", measured)):
                backend._threads = tuner
                row[name] = round(decode_rate(backend, prompt, a.tokens), 1)
            row["chosen"] = measured.best(1)
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        backend.close()
    held = statistics.median(r["held"] for r in rows)
    got = statistics.median(r["measured"] for r in rows)
    print(json.dumps({"held_tok_s": held, "measured_tok_s": got, "ratio": round(got / held, 2)}))
    return Result(rows=rows, ratios={"measured_over_held": round(got / held, 2)},
                  detail={"threads": a.threads, "prompt_tokens": len(prompt), "tokens": a.tokens,
                          "held_tok_s": held, "measured_tok_s": got})
