"""The most copying drafts could win on this machine: every lookup chain cut with hindsight,
against plain decoding, priced by this machine's measured cost of a pass by rows.

    .venv/bin/python -m benchmarks lookup_ceiling [--edit 30] [--chat 20] [--tokens 128] [--threads 2]
        [--out docs/results/2026-12-06/lookup-ceiling.json]

1. Cost of a pass: the llama.cpp backend on the embedded SmolLM2, after a 400-token prefill, verifies
   chains of r = 1..12 rows, every row count in turn each round, 25 rounds; t(r) = the median.
2. Greedy answers (`--method none`) to the edit set's first --edit prompts and the test set's first
   --chat chat prompts (the sets benchmarks/suites/auto.py measures).
3. At every position of every answer, the chain each lookup offers there (prompt lookup: this
   sequence's longest match; suffix: the same search plus a store of the answers before it), and how
   many of its tokens the answer goes on with: known only afterwards, which is the hindsight.
4. The cheapest schedule, by dynamic programming over positions: a plain step (1 token) or the
   better lookup's chain cut to n <= its accepted tokens (n + 1 tokens, n + 1 rows). Priced for a
   lane alone (t(n + 1)) and for a lane among 4 that are always busy (a server: its share of the
   four's plain pass, t(4) / 4, plus the rows it adds, t(4 + n) - t(4)).

ceiling = plain time / cheapest time. No choice made before the tokens are known can beat it, so a
target above it cannot be met on this machine by copying, however the choice is made.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from benchmarks.harness import add_threads
from benchmarks.results import Result
from benchmarks.suites.auto import items
from homespec.speculative.methods import LOOKUP_DEPTH as DEPTH  # the longest chain auto's lookups offer

LANES = (1, 4)
MAX_ROWS = max(LANES) + DEPTH


def cost_curve(threads: int, rounds: int = 25) -> dict[int, float]:
    """Median seconds of a verify of r chain rows, r = 1..MAX_ROWS, the row counts taken in turn
    each round (a machine whose speed drifts slows them all alike)."""
    from homespec.backends.llamacpp.backend import LlamaCppBackend
    from homespec.backends.settings import BackendSettings
    from homespec.embedded import smollm2_path

    runs: dict[int, list[float]] = {r: [] for r in range(1, MAX_ROWS + 1)}
    with LlamaCppBackend(str(smollm2_path()), BackendSettings(n_ctx=2048, n_threads=threads)) as b:
        b.prefill(list(range(1000, 1400)))
        for _ in range(rounds):
            for r in runs:
                t = time.perf_counter()
                b.verify([1500 + j for j in range(r)], [-1, *range(r - 1)])
                runs[r].append(time.perf_counter() - t)
                b.commit([0])
                b.rollback(1)
    return {r: statistics.median(ts) for r, ts in runs.items()}


def step_cost(curve: dict[int, float], lanes: int, cut: int) -> float:
    """Seconds a lane's step with a chain of `cut` tokens costs: alone, the pass of cut + 1 rows;
    among `lanes` busy lanes (the others plain), its share of their plain pass plus the rows it adds."""
    base = curve[lanes]
    return base / lanes + curve[lanes + cut] - base


def greedy_answers(items, tokens: int, threads: int) -> tuple[list[list[int]], list[list[int]]]:
    """Prompt token ids and --method none's greedy answers."""
    from homespec.bench.run import run_bench
    from homespec.engine.options import RunOptions
    from homespec.session.encode import prompt_tokens

    opts = RunOptions(method="none", guard=True, threads=threads, ctx=2048, draft_depth=4, draft_topk=1,
                      draft_tokens=5)
    kept: list[list[int]] = []

    def token_prompts(session):
        kept.extend(prompt_tokens(session, list(i.turns[:1]), True) for i in items)
        return kept

    res = run_bench(opts, ["none"], token_prompts, max_tokens=tokens)
    return kept, res.methods["none"].outputs


def accepted_runs(prompt: list[int], answer: list[int], store) -> list[int]:
    """For each position i of `answer` (answer[:i] written), the most tokens the better lookup's
    chain there agrees with answer[i:]."""
    from homespec.engine.reuse import common_prefix
    from homespec.speculative.drafters.ngram import NgramDrafter
    from homespec.speculative.drafters.suffix import SuffixDrafter
    from homespec.speculative.matching import matches

    ngram, suffix = NgramDrafter(num_draft=DEPTH), SuffixDrafter(store, num_draft=DEPTH)
    suffix.begin(prompt, None)
    suffix.accept(answer[:1], None, 0)
    out = [0] * len(answer)
    for i in range(1, len(answer)):
        seq = np.asarray(prompt + answer[:i], dtype=np.int64)
        found = matches(seq)
        for offer in ngram.offer_in(seq, found) + suffix.offer_in(seq, found):
            out[i] = max(out[i], common_prefix(offer.tokens, answer[i:]))
        suffix.accept(answer[i:i + 1], None, 0)
    return out


def cheapest(runs: list[int], price: list[float]) -> float:
    """Least seconds to write the answer after its first token (which the prompt's pass gives)."""
    n = len(runs)
    best = [0.0] + [float("inf")] * n  # best[j]: answer[:j + 1] written
    for i in range(n - 1):
        if best[i] == float("inf"):
            continue
        for cut in range(0, runs[i + 1] + 1):
            j = min(n - 1, i + cut + 1)
            best[j] = min(best[j], best[i] + price[cut])
    return best[n - 1]


def hindsight(prompts, answers) -> list[list[int]]:
    """accepted_runs of each answer, the suffix store holding the answers before it."""
    from homespec.speculative.drafters.suffix import SuffixStore

    store = SuffixStore()
    return [accepted_runs(p, a, store) for p, a in zip(prompts, answers)]


def ceilings(runs, categories, curve: dict, lanes: int) -> dict:
    """Plain time over the cheapest, per category and in all, for a lane among `lanes`."""
    price = [step_cost(curve, lanes, cut) for cut in range(DEPTH + 1)]
    by: dict[str, list[float]] = {}
    for r, c in zip(runs, categories):
        if len(r) < 2:
            continue
        plain = (len(r) - 1) * price[0]
        best = cheapest(r, price)
        for key in (c, "all"):
            t = by.setdefault(key, [0.0, 0.0])
            t[0], t[1] = t[0] + plain, t[1] + best
    return {k: round(p / b, 3) for k, (p, b) in sorted(by.items())}


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--edit", type=int, default=30)
    ap.add_argument("--chat", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=128)
    add_threads(ap, 2)


def run(a: argparse.Namespace) -> Result:
    curve = cost_curve(a.threads)
    print("ms by rows:", {r: round(t * 1e3, 2) for r, t in curve.items()}, flush=True)
    sets = {"edit": items("edit", None, a.edit), "chat": items("test", "chat", a.chat)}
    out: dict = {"seconds_by_rows": {r: round(t, 6) for r, t in curve.items()}, "tokens": a.tokens, "depth": DEPTH, "ceiling": {}}
    for name, chosen in sets.items():
        runs = hindsight(*greedy_answers(chosen, a.tokens, a.threads))
        cats = [i.category for i in chosen]
        out["ceiling"][name] = {f"{n} lane{'s' if n > 1 else ''}": ceilings(runs, cats, curve, n) for n in LANES}
        print(name, json.dumps(out["ceiling"][name]), flush=True)
    rows = [{"set": name, "lanes": lanes, "by_category": c} for name, d in out["ceiling"].items() for lanes, c in d.items()]
    return Result(rows=rows, ratios={f"{name}_{lanes.replace(' ', '_')}": c["all"] for name, d in out["ceiling"].items()
                                     for lanes, c in d.items() if "all" in c},
                  detail={k: v for k, v in out.items() if k != "ceiling"})

