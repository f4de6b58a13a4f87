"""Time the speculative loop's kernels against their torch references, and the torch backend's
tokens/s with and without kernels.

    python -m benchmarks kernels [--model PATH] [--tokens 128] [--reps 200] [--threads N] [--skip-e2e]

On a CUDA GPU every usable implementation (Triton, CUDA C++) is timed beside the reference at
sizes of a real step (a 60-node tree, a 49,152-token vocabulary, a 30-layer cache); without one
the script says so and times the CPU reference only. Each figure is the median of --reps calls
(synchronised on a GPU). Results go to stdout as a table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from benchmarks.harness import add_model, smollm2, use_tests
from benchmarks.results import Result

use_tests()


def _timer(device):
    import torch

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    def run(fn, reps: int) -> float:
        fn()  # warm-up (Triton compiles, the CUDA extension builds on first use)
        sync()
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            sync()
            times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1e6  # microseconds per call: the median resists other jobs' bursts

    return run


def bench_ops(reps: int) -> list[dict]:
    import torch
    from tests.kernels.test_kernels import greedy_case, random_tree, sampled_case

    from homespec import kernels

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    impls = ["torch"] + [s.impl for s in kernels.available() if s.usable and s.impl in ("triton", "cuda")
                         and device.type == "cuda"]
    if device.type != "cuda":
        print("no CUDA GPU: timing the torch reference on the CPU only", file=sys.stderr)
    timer = _timer(device)
    tokens, parents, target = (x.to(device) for x in greedy_case(60, 4, 0))
    st, sp, probs, coins, u = sampled_case(60, 49152, 0)
    st, sp, probs, coins = st.to(device), sp.to(device), probs.to(device), coins.to(device)
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    k = torch.randn(30, 3, 4096, 64, dtype=dtype, device=device)  # SmolLM2-135M's cache shape at 4k
    v = torch.randn_like(k)
    par = random_tree(60, torch.Generator().manual_seed(0))
    path = [59]
    while par[path[-1]] >= 0:
        path.append(int(par[path[-1]]))
    nodes = torch.tensor(path[::-1], device=device)
    ops = {
        "verify_greedy_paths (T=60)": lambda impl: kernels.verify_greedy_paths(tokens, parents, target, impl=impl).length.item(),
        "verify_sampled_paths (T=60, V=49152)": lambda impl: kernels.verify_sampled_paths(st, sp, probs, coins, u, impl=impl).length.item(),
        "tree_mask (T=60, past=2048)": lambda impl: kernels.tree_mask(parents, 2048, impl=impl),
        f"compact_kv ({len(path)} rows, 30x3x64)": lambda impl: kernels.compact_kv(k, v, 1000, nodes, impl=impl),
    }
    print(f"{'operation':40} " + " ".join(f"{i + ' us':>12}" for i in impls))
    rows = []
    for name, fn in ops.items():
        times = [timer(lambda: fn(impl), reps) for impl in impls]
        print(f"{name:40} " + " ".join(f"{t:12.1f}" for t in times))
        rows += [{"operation": name, "impl": impl, "device": device.type, "us": round(t, 2)} for impl, t in zip(impls, times)]
    return rows


def bench_end_to_end(model: str, n_tokens: int) -> list[dict]:
    import torch

    from homespec.backends.torch.backend import TorchBackend
    from homespec.speculative.drafters.ngram import NgramDrafter
    from homespec.engine.run import decode
    from homespec.speculative.steps import Limits

    device = "cuda" if torch.cuda.is_available() else "cpu"
    be = TorchBackend.load(model, device=device, max_context=2048)
    prompt = be.tokenizer.encode("List the numbers from one to forty, in words, separated by commas: one, two, three,")
    print(f"\nend to end, torch backend on {device}, n-gram drafts, {n_tokens} tokens")
    rows = []
    for mode in ("torch", "auto"):
        os.environ["HOMESPEC_KERNELS"] = mode
        from homespec.kernels import selected

        be.reset()
        t0 = time.perf_counter()
        steps = list(decode(be, NgramDrafter(max_ngram=3, num_draft=5), prompt,
                              limits=Limits(max_tokens=n_tokens, stop_at_eos=False)))
        dt = time.perf_counter() - t0
        made = sum(len(s.tokens) for s in steps)
        print(f"  kernels={mode:5} ({selected(device) if mode == 'auto' else 'torch'}): {made / dt:7.1f} tok/s")
        rows.append({"operation": "end to end", "impl": mode, "device": device, "tokens_per_s": round(made / dt, 2)})
    os.environ.pop("HOMESPEC_KERNELS", None)
    return rows


def add_arguments(ap: argparse.ArgumentParser) -> None:
    add_model(ap, "GGUF file or HF directory for the end-to-end run (default: the embedded SmolLM2)")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--threads", type=int, default=0, help="torch's intra-op threads (default: torch's choice)")
    ap.add_argument("--skip-e2e", action="store_true")


def run(a: argparse.Namespace) -> Result:
    if a.threads:
        import torch

        torch.set_num_threads(a.threads)
    rows = bench_ops(a.reps)
    if not a.skip_e2e:
        rows += bench_end_to_end(a.model or str(smollm2()), a.tokens)
    return Result(rows=rows, detail={"reps": a.reps, "tokens": a.tokens, "threads": a.threads})

