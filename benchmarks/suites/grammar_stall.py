"""An innocent request beside a huge response_format, measured side by side on a real server.

    .venv/bin/python -m benchmarks grammar_stall [--rounds 5] [--properties 10000] [--threads 2]
        [--json FILE]

Starts `homespec serve` (the embedded SmolLM2, plain decoding, 2 slots) and, for each big schema,
alternates rounds of: the innocent request alone (4 greedy tokens of a chat answer), then the same
request sent while a request with the big `response_format` is in flight (sent 0.3 s before it,
so its compile is under way). Prints each round and the medians side by side: the innocent
request's time alone and beside the big one, their ratio (the target: at most 2x), and what the
big request got (its status and time).

The big schemas: `optional`, an object of --properties optional integer properties (refused
before compiling: homespec.grammar.compile.MAX_OPTIONAL_PROPERTIES), and `required`, the same
properties all required (compiled, on the compiler's thread).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

from benchmarks.harness import ROOT, add_rounds, add_threads
from benchmarks.results import Result

INNOCENT = {"model": "x", "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4, "temperature": 0}


def big_schema(n: int, required: bool) -> dict:
    props = {f"p{i}": {"type": "integer"} for i in range(n)}
    schema = {"type": "object", "properties": props, **({"required": list(props)} if required else {})}
    return {"model": "x", "messages": [{"role": "user", "content": "Fill in the form."}], "max_tokens": 8,
            "temperature": 0, "response_format": {"type": "json_schema", "json_schema": {"name": "form",
                                                                                       "schema": schema}}}


def post(base: str, body: dict, timeout: float = 300) -> tuple[int, float]:
    """(status, seconds) of one chat completion."""
    data = json.dumps(body).encode()
    req = urllib.request.Request(base + "/v1/chat/completions", data=data, headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        e.read()
        status = e.code
    return status, time.perf_counter() - t0


def start_server(threads: int) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "homespec", "serve", "--port", "0", "--method", "none",
                             "--parallel", "2", "--threads", str(threads), "--ctx", "1024"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    m = re.search(r"(http://127\.0\.0\.1:\d+)/v1", line)
    if m is None:
        proc.kill()
        raise SystemExit(f"serve did not start: {line!r}")
    return proc, m.group(1)


def beside(base: str, big: dict) -> tuple[float, tuple[int, float]]:
    """The innocent request's seconds while `big` is in flight, and what `big` got."""
    got: list[tuple[int, float]] = []
    t = threading.Thread(target=lambda: got.append(post(base, big)))
    t.start()
    time.sleep(0.3)
    _, s = post(base, INNOCENT)
    t.join()
    return s, got[0]


def add_arguments(ap: argparse.ArgumentParser) -> None:
    add_rounds(ap, 5)
    ap.add_argument("--properties", type=int, default=10_000)
    add_threads(ap, 2)


def run(a: argparse.Namespace) -> Result:
    load0 = os.getloadavg()[0]
    print(f"load average at the start: {load0:.2f} on {os.cpu_count()} CPUs", flush=True)
    proc, base = start_server(a.threads)
    rows = {}
    try:
        post(base, INNOCENT)  # warm: the first request builds what later ones reuse
        for kind, required in (("optional", False), ("required", True)):
            body = big_schema(a.properties, required)
            alone, near, bigs = [], [], []
            for i in range(a.rounds):
                alone.append(post(base, INNOCENT)[1])
                s, big = beside(base, body)
                near.append(s)
                bigs.append(big)
                print(f"{kind} round {i + 1}: innocent alone {alone[-1]:.3f} s, beside {s:.3f} s "
                      f"({s / alone[-1]:.2f}x); the big request: {big[0]} in {big[1]:.2f} s", flush=True)
            rows[kind] = {"alone_s": statistics.median(alone), "beside_s": statistics.median(near),
                          "ratio": statistics.median(near) / statistics.median(alone),
                          "big_status": sorted({b[0] for b in bigs}), "big_s": statistics.median(b[1] for b in bigs),
                          "rounds": [{"alone_s": x, "beside_s": y, "big_status": b[0], "big_s": b[1]}
                                     for x, y, b in zip(alone, near, bigs)]}
    finally:
        proc.terminate()
        proc.wait(60)
    print(f"\n{'schema':<10} {'alone (median)':>15} {'beside (median)':>16} {'ratio':>7}  big request")
    for kind, r in rows.items():
        print(f"{kind:<10} {r['alone_s']:>13.3f} s {r['beside_s']:>14.3f} s {r['ratio']:>6.2f}x  "
              f"{'/'.join(map(str, r['big_status']))} in {r['big_s']:.2f} s")
    load1 = os.getloadavg()[0]
    print(f"load average at the end: {load1:.2f}")
    return Result(rows=[{"schema": kind, **r} for kind, r in rows.items()],
                  ratios={f"beside_over_alone_{kind}": round(r["ratio"], 3) for kind, r in rows.items()},
                  detail={"properties": a.properties, "load_average": [round(load0, 2), round(load1, 2)]})

