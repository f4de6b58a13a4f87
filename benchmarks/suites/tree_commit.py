"""What a draft tree's verify and commit cost the host, outside llama_decode, as the context grows:
the sequence-id bookkeeping of backends/llamacpp/backend.py (docs/backends.md, "Tree verification
in one pass") on the embedded model, after prompts of several lengths.

    python -m benchmarks tree_commit [--prompts 512,4096] [--steps 30] [--threads 1]

Per prompt length: a 48-node tree (6 levels of 8 nodes, the planner's 6-deep 8-wide shape) is
verified and a 2-node path committed, `--steps` times; llama_decode is timed with the same clock
and taken out. Prints the median host time of a step per prompt length (the first 5 steps left
out). Run it from two checkouts to compare them.
"""

from __future__ import annotations

import argparse
import statistics
import time

from benchmarks.harness import add_threads, smollm2
from benchmarks.results import Result


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--prompts", default="512,4096", help="prompt lengths, a comma list")
    ap.add_argument("--steps", type=int, default=30)
    add_threads(ap, 1)


def tree_parents(levels: int = 6, width: int = 8, nodes: int = 48) -> list[int]:
    """A tree of `nodes` nodes: the root, then levels of `width` nodes, each level's nodes spread
    over the previous level's (the last level cut to fit)."""
    parents, prev = [-1], [0]
    for _ in range(levels):
        cur = []
        for j in range(min(width, nodes - len(parents))):
            parents.append(prev[j % len(prev)])
            cur.append(len(parents) - 1)
        prev = cur
    return parents


def measure(n_prompt: int, steps: int, threads: int) -> float:
    """Median host seconds of one verify + commit after an `n_prompt`-token prompt."""
    import numpy as np

    import homespec.backends.llamacpp.core as core
    from homespec.backends.llamacpp.backend import LlamaCppBackend
    from homespec.backends.settings import BackendSettings

    spent = [0.0]
    real = core.run_decode

    def timed(*args):
        t0 = time.perf_counter()
        try:
            return real(*args)
        finally:
            spent[0] += time.perf_counter() - t0

    core.run_decode = timed
    parents = tree_parents()
    rng = np.random.default_rng(0)
    host = []
    try:
        with LlamaCppBackend(str(smollm2()), BackendSettings(n_ctx=n_prompt + 1024, n_threads=threads),
                             max_leaves=len(parents) - 1) as b:
            b.prefill([int(t) for t in rng.integers(100, 20000, n_prompt)])
            for _ in range(steps):
                tokens = [int(t) for t in rng.integers(100, 20000, len(parents))]
                spent[0] = 0.0
                t0 = time.perf_counter()
                b.verify(tokens, parents)
                b.commit([0, 1])
                host.append(time.perf_counter() - t0 - spent[0])
    finally:
        core.run_decode = real
    return statistics.median(host[5:])


def run(a: argparse.Namespace) -> Result:
    rows = []
    for n in (int(x) for x in a.prompts.split(",")):
        ms = measure(n, a.steps, a.threads) * 1e3
        print(f"prompt {n:6d} tokens: a 48-node tree's verify + commit, host outside llama_decode {ms:.3f} ms",
              flush=True)
        rows.append({"prompt_tokens": n, "host_ms": round(ms, 3)})
    return Result(rows=rows, detail={"steps": a.steps, "threads": a.threads, "tree": "48 nodes, 6 levels of 8"})
