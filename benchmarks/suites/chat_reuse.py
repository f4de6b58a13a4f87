"""`homespec chat`'s time to first token per turn, with prompt reuse and without (--no-cache-prompt).

    .venv/bin/python scripts/bench_chat_reuse.py [--turns 8] [--doc-tokens 1200] [--tokens 96] [--rounds 2]
        [--json FILE]

Runs `homespec chat` (the defaults: the embedded SmolLM2, its head, the guard) on the same lines read from
stdin: a first message carrying a document of about --doc-tokens tokens (homespec's long-prompt material),
then questions about it (scripts/bench_reuse.py's). Each round runs both modes, the order alternating. Per
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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--doc-tokens", type=int, default=1200)
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json")
    a = ap.parse_args()
    from bench_reuse import QUESTIONS, document

    doc = " ".join(document(a.doc_tokens).split())  # one line: chat reads a message per line
    lines = [f"Read this document. {doc} {QUESTIONS[0]}"] + [QUESTIONS[i % len(QUESTIONS)] for i in range(1, a.turns)]
    runs: dict[str, list[dict]] = {"reuse": [], "fresh": []}
    for rnd in range(a.rounds):
        for mode in (("reuse", "fresh") if rnd % 2 == 0 else ("fresh", "reuse")):
            runs[mode].append(run_chat(lines, a.tokens, reuse=mode == "reuse"))
            print(f"round {rnd + 1} {mode}: ttft {runs[mode][-1]['ttft_s']}, {runs[mode][-1]['wall_s']:.1f} s", flush=True)
    med = {m: [statistics.median(r["ttft_s"][i] for r in runs[m]) for i in range(a.turns)] for m in runs}
    wall = {m: statistics.median(r["wall_s"] for r in runs[m]) for m in runs}
    summary = {"ttft_s": med, "last_over_first_ttft_reuse": round(med["reuse"][-1] / med["reuse"][0], 3),
               "wall_s": {m: round(w, 1) for m, w in wall.items()}, "fresh_over_reuse_wall": round(wall["fresh"] / wall["reuse"], 3)}
    print(json.dumps(summary, indent=1))
    if a.json:
        from homespec.atomic import write_text

        write_text(a.json, json.dumps({"args": vars(a), "runs": runs, "summary": summary}, indent=1) + "\n")


if __name__ == "__main__":
    main()
