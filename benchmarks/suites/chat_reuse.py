"""`homespec chat`'s time to first token per turn, with prompt reuse and without (--no-cache-prompt).

    python -m benchmarks chat_reuse [--turns 8] [--doc-tokens 1200] [--tokens 96] [--rounds 2] [--json FILE]

Runs `homespec chat` (the defaults: the embedded SmolLM2, its head, the guard) on the same lines read from
stdin: a first message carrying a document of about --doc-tokens tokens (homespec's long-prompt material),
then questions about it (the reuse suite's). Each round runs both modes, the order alternating. Per
turn: the readout's `ttft` (from sending the message to the answer's first token). Printed: medians per
turn, the last turn's over the first's with reuse, and the whole conversation's wall time both ways.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.harness import add_rounds, alternate
from benchmarks.results import Result
from benchmarks.suites.reuse import QUESTIONS, document

TTFT = re.compile(r"ttft (\d+\.\d+) s")


def run_chat(lines: list[str], tokens: int, reuse: bool) -> dict:
    cmd = [sys.executable, "-m", "homespec", "chat", "-n", str(tokens), "--ctx", "4096"]
    if not reuse:
        cmd.append("--no-cache-prompt")
    with tempfile.TemporaryDirectory() as chats:
        env = {**os.environ, "HOMESPEC_CHATS_DIR": chats}
        t0 = time.perf_counter()
        p = subprocess.run(cmd, input="\n".join(lines) + "\n", capture_output=True, text=True, env=env, timeout=3600)
        wall = time.perf_counter() - t0
    readouts = [ln for ln in p.stderr.splitlines() if ln.startswith("[") and "ttft" in ln]
    ttft = [float(TTFT.search(ln).group(1)) for ln in readouts]
    if p.returncode != 0 or len(ttft) != len(lines):
        raise SystemExit(f"error: chat exited {p.returncode} with {len(ttft)} readouts: {p.stderr[-800:]}")
    return {"ttft_s": ttft, "wall_s": wall}


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--doc-tokens", type=int, default=1200)
    ap.add_argument("--tokens", type=int, default=96)
    add_rounds(ap, 2)


def run(a: argparse.Namespace) -> Result:
    doc = " ".join(document(a.doc_tokens).split())  # one line: chat reads a message per line
    lines = [f"Read this document. {doc} {QUESTIONS[0]}"] + [QUESTIONS[i % len(QUESTIONS)] for i in range(1, a.turns)]

    def arm(mode: str) -> dict:
        r = run_chat(lines, a.tokens, reuse=mode == "reuse")
        print(f"{mode}: ttft {r['ttft_s']}, {r['wall_s']:.1f} s", flush=True)
        return r

    runs = alternate({"reuse": lambda: arm("reuse"), "fresh": lambda: arm("fresh")}, a.rounds)
    med = {m: [statistics.median(r["ttft_s"][i] for r in runs[m]) for i in range(a.turns)] for m in runs}
    wall = {m: statistics.median(r["wall_s"] for r in runs[m]) for m in runs}
    summary = {"ttft_s": med, "last_over_first_ttft_reuse": round(med["reuse"][-1] / med["reuse"][0], 3),
               "wall_s": {m: round(w, 1) for m, w in wall.items()}, "fresh_over_reuse_wall": round(wall["fresh"] / wall["reuse"], 3)}
    print(json.dumps(summary, indent=1))
    rows = [{"mode": m, "round": i + 1, **r} for m, rs in runs.items() for i, r in enumerate(rs)]
    return Result(rows=rows, ratios={k: summary[k] for k in ("last_over_first_ttft_reuse", "fresh_over_reuse_wall")},
                  detail={"turns": a.turns, "doc_tokens": a.doc_tokens, "tokens": a.tokens, "rounds": a.rounds,
                          "ttft_s": med, "wall_s": summary["wall_s"]})

