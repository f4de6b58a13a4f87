"""`homespec plan` wall time next to `python -c pass`, measured side by side in one run.

    python -m benchmarks plan_startup [--repeat 7]

Prints the median of each and their ratio; the ratio, not the absolute time, is the figure to
compare across machines.
"""

from __future__ import annotations

import argparse
import statistics
import sys

from benchmarks.harness import alternate, timed_run
from benchmarks.results import Result

HOMESPEC = [sys.executable, "-m", "homespec", "plan", "--gpu", "4090", "--model", "llama-3.1-70b-q4", "--json"]
BASELINE = [sys.executable, "-c", "pass"]


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--repeat", type=int, default=7)


def run(args: argparse.Namespace) -> Result:
    timed_run(HOMESPEC, ok=(0, 3))  # warm the page cache
    # interleaved, so machine noise hits both alike
    t = alternate({"python -c pass": lambda: timed_run(BASELINE),
                   "homespec plan": lambda: timed_run(HOMESPEC, ok=(0, 3))}, args.repeat)
    b, p = statistics.median(t["python -c pass"]), statistics.median(t["homespec plan"])
    print(f"python -c pass : {b * 1e3:8.1f} ms (median of {args.repeat})")
    print(f"homespec plan  : {p * 1e3:8.1f} ms (median of {args.repeat})")
    print(f"ratio          : {p / b:8.1f}x")
    rows = [{"arm": arm, "round": i + 1, "seconds": round(s, 4)} for arm, ss in t.items() for i, s in enumerate(ss)]
    return Result(rows=rows, ratios={"plan_over_python": round(p / b, 2)},
                  detail={"repeat": args.repeat, "command": HOMESPEC[1:]})
