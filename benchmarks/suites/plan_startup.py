"""`homespec plan` wall time next to `python -c pass`, measured side by side in one run.

    .venv/bin/python scripts/bench_plan_startup.py [--repeat 7]

Prints the median of each and their ratio; the ratio, not the absolute time, is the figure to
compare across machines.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

HOMESPEC = [sys.executable, "-m", "homespec", "plan", "--gpu", "4090", "--model", "llama-3.1-70b-q4", "--json"]
BASELINE = [sys.executable, "-c", "pass"]


def timed(cmd: list[str]) -> float:
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True)
    if r.returncode not in (0, 3):
        raise SystemExit(f"error: {' '.join(cmd)} exited {r.returncode}: {r.stderr.decode()[-300:]}")
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    timed(HOMESPEC)  # warm the page cache
    plan_t, base_t = [], []
    for _ in range(args.repeat):  # interleaved, so machine noise hits both alike
        base_t.append(timed(BASELINE))
        plan_t.append(timed(HOMESPEC))
    p, b = statistics.median(plan_t), statistics.median(base_t)
    print(f"python -c pass : {b * 1e3:8.1f} ms (median of {args.repeat})")
    print(f"homespec plan  : {p * 1e3:8.1f} ms (median of {args.repeat})")
    print(f"ratio          : {p / b:8.1f}x")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())
