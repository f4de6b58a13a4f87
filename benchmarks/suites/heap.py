"""homespec.heap on and off, side by side: the same torch CPU work in fresh processes, alternating.

    .venv/bin/python -m benchmarks heap [--rounds 3] [--json FILE]

Workloads (each timed inside its own process, after a warm-up):
  train     training-time-test steps (forward + backward, 5 unroll steps) of a head shaped for the
            embedded SmolLM2 on a random batch of 2 x 1024 positions
  decode    64 tokens of plain greedy decoding on the torch backend (SmolLM2, fp32)
Prints, per workload, the median seconds with the setting on and off, the ratio off/on, and the
page faults (minor) each process took.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

from benchmarks.harness import ROOT, add_rounds, alternate
from benchmarks.results import Result


def _train(steps: int) -> float:
    import torch

    from homespec.embedded import smollm2_path
    from homespec.nets.eagle3 import Eagle3Head
    from homespec.train.api import head_config, read_target_config
    from homespec.train.ttt import Batch, Frozen, ttt_loss

    from homespec.heap import keep_freed_memory

    keep_freed_memory()  # what train() does first; a no-op with HOMESPEC_KEEP_HEAP=0
    torch.manual_seed(0)
    cfg = read_target_config(str(smollm2_path()))
    head = Eagle3Head(head_config(cfg, 8192, False))
    frozen = Frozen(torch.randn(cfg.n_vocab, cfg.n_embd) * 0.02, torch.randn(cfg.n_vocab, cfg.n_embd) * 0.02,
                    torch.arange(8192))
    B, T, H = 2, 1024, cfg.n_embd
    batch = Batch(torch.randint(0, 8192, (B, T)), torch.randn(B, T, 3 * H), torch.randn(B, T, H),
                  torch.ones(B, T, dtype=torch.bool), torch.full((B,), T))
    opt = torch.optim.AdamW(head.parameters(), lr=1e-4)

    def step() -> None:
        out = ttt_loss(head, frozen, batch, 5)
        opt.zero_grad()
        out.loss.backward()
        opt.step()

    step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return time.perf_counter() - t0


def _decode(tokens: int) -> float:
    from homespec.backends.torch.backend import TorchBackend
    from homespec.embedded import smollm2_path
    from homespec.engine.run import decode
    from homespec.speculative.steps import Limits

    b = TorchBackend.load(str(smollm2_path()), device="cpu", max_context=1024)
    ids = b.tokenizer.encode("Describe how a bicycle gear works, step by step.")
    list(decode(b, None, ids, limits=Limits(max_tokens=8, stop_at_eos=False)))
    b.reset()
    t0 = time.perf_counter()
    list(decode(b, None, ids, limits=Limits(max_tokens=tokens, stop_at_eos=False)))
    return time.perf_counter() - t0


def _child(work: str) -> None:
    seconds = _train(4) if work == "train" else _decode(64)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    print(json.dumps({"seconds": seconds, "minor_faults": faults}))


def add_arguments(ap: argparse.ArgumentParser) -> None:
    add_rounds(ap, 3)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)


def run(a: argparse.Namespace) -> Result:
    if a.child:
        _child(a.child)
        return Result()
    out, rows = {}, []
    for work in ("train", "decode"):

        def fresh(mode: str, work: str = work) -> dict:
            env = {**os.environ, "HOMESPEC_KEEP_HEAP": "1" if mode == "on" else "0"}
            r = subprocess.run([sys.executable, "-m", "benchmarks", "heap", "--child", work, "--no-json"], env=env,
                               capture_output=True, text=True, check=True, cwd=ROOT)
            return json.loads(r.stdout.strip().splitlines()[-1])

        runs = alternate({"on": lambda: fresh("on"), "off": lambda: fresh("off")}, a.rounds)
        rows += [{"work": work, "heap_kept": mode, "round": i + 1, **r} for mode, rs in runs.items() for i, r in enumerate(rs)]
        on = statistics.median(r["seconds"] for r in runs["on"])
        off = statistics.median(r["seconds"] for r in runs["off"])
        out[work] = {"on_s": round(on, 3), "off_s": round(off, 3), "speedup": round(off / on, 3),
                     "faults_on": int(statistics.median(r["minor_faults"] for r in runs["on"])),
                     "faults_off": int(statistics.median(r["minor_faults"] for r in runs["off"]))}
        print(f"{work:6s}  heap kept {on:7.2f} s   default {off:7.2f} s   {off / on:.2f}x   "
              f"minor faults {out[work]['faults_on']:,} vs {out[work]['faults_off']:,}", flush=True)
    return Result(rows=rows, ratios={f"{w}_off_over_on": r["speedup"] for w, r in out.items()}, detail=out)

