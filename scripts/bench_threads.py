"""Decode speed with the thread count measured per decode (the default) and held at --threads,
side by side in alternating rounds on the same loaded backend (backends/llamacpp/threads.py).

    .venv/bin/python scripts/bench_threads.py [--threads 2] [--rounds 6] [--tokens 48] [--json FILE]

Each round: the same prompt prefilled and --tokens greedy tokens decoded one by one, once held and
once measured; reported per round and as medians, with the load average: run it while the cores
are busy with other work and again while they are idle.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

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


def main() -> None:
    from homespec.backends.llamacpp.backend import LlamaCppBackend
    from homespec.backends.llamacpp.threads import ThreadTuner
    from homespec.embedded import smollm2_path

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--tokens", type=int, default=48)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    backend = LlamaCppBackend.load(smollm2_path(), n_ctx=1024, n_threads=args.threads)
    prompt = backend.tokenizer.encode(PROMPT, add_bos=True)
    measured = ThreadTuner(args.threads)  # kept across rounds, as a server keeps it
    rows = []
    try:
        for r in range(args.rounds):
            row = {"round": r + 1, "load": round(os.getloadavg()[0], 1)}
            for name, tuner in (("held", ThreadTuner(args.threads, fixed=True)), ("measured", measured)):
                backend._threads = tuner
                row[name] = round(decode_rate(backend, prompt, args.tokens), 1)
            row["chosen"] = measured.best(1)
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        backend.close()
    summary = {"threads": args.threads, "prompt_tokens": len(prompt), "tokens": args.tokens,
               "held_tok_s": statistics.median(r["held"] for r in rows),
               "measured_tok_s": statistics.median(r["measured"] for r in rows)}
    summary["ratio"] = round(summary["measured_tok_s"] / summary["held_tok_s"], 2)
    print(json.dumps(summary))
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "rounds": rows}, indent=1))


if __name__ == "__main__":
    main()
