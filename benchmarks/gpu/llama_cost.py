"""What a target pass and a draft cost in homespec's llama.cpp path, by tree size and draft depth: the
8B figures of the GPU check (docs/gpu.md, "The 8B figures"), on the random-weight files of
benchmarks/gpu/shaped.py. No torch: run it where torch is not imported (benchmarks/gpu/notorch.py).

    python benchmarks/gpu/llama_cost.py --target T.gguf --head H.gguf [--ctx 1024] [--nodes 1,2,4,8,16,32,48,64]
        [--depths 1,2,3,4,5,6] [--repeats 20] [--warmup 3] [--gpu-layers -1] [--json FILE]

* **target pass**: after a `--ctx`-token prompt, `LlamaCppBackend.verify` of a T-node tree (T = 1: the plain
  step's one token; larger: an EAGLE-2 dynamic tree, 6 deep and 8 wide, as the host_step suite (benchmarks/suites/host_step.py) grows
  them), the way the engine runs a step: tree attention over sequence ids, the layer features captured, the
  logits and features read back. Each repeat is undone (commit the root, roll back), so every pass sees the
  same context. Wall time per pass, and the part inside llama_decode.
* **draft**: `HeadDrafter.propose` with the head in llama.cpp beside the target (LlamaCppHead), for chains
  (top-1) and trees (top-8, 48 nodes at most) of each depth; between drafts the target verifies the tree and
  `--accepted` tokens of its first-child path are committed and handed back, so each draft also writes
  that many entries into the head's cache, as after a real step. Wall time per draft, the time inside the
  head's graph calls (its llama_decode and llama_encode calls, those inside a tree grown in one call,
  backends/llamacpp/head_tree.py, included), and their count.

Medians (and p10 / p90) over `--repeats` after `--warmup`, timed with time.perf_counter.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

if TYPE_CHECKING:
    from benchmarks.suites.host_step import Timed

TOPK_TREE, TREE_TOTAL = 8, 48  # the planner's default tree on a GPU (homespec.plan.settings)


def stats(xs: Sequence[float]) -> dict[str, float]:
    ms = [x * 1e3 for x in xs]
    return {"median": round(statistics.median(ms), 4), "p10": round(float(np.percentile(ms, 10)), 4),
            "p90": round(float(np.percentile(ms, 90)), 4), "n": len(ms)}


def tree_parents(nodes: int) -> list[int]:
    from benchmarks.suites.host_step import shape_parents

    if nodes == 1:
        return [-1]
    return shape_parents("chain2") if nodes == 2 else shape_parents(f"tree{nodes}")


def target_curve(backend: Any, clock: "Timed", sizes: Sequence[int], warmup: int, repeats: int,
                 rng: np.random.Generator) -> list[dict[str, Any]]:
    """One row per tree size: the verify pass's wall time and its llama_decode part."""
    rows = []
    for n in sizes:
        parents = tree_parents(n)
        tokens = rng.integers(0, backend.n_vocab, size=n).tolist()
        walls, decodes = [], []
        for r in range(warmup + repeats):
            clock.reset()
            t0 = time.perf_counter()
            backend.verify(tokens, parents)
            wall = time.perf_counter() - t0
            backend.commit([0])
            backend.rollback(1)
            if r >= warmup:
                walls.append(wall), decodes.append(clock.decode_s)
        depth = _depth(parents)
        rows.append({"nodes": n, "depth": depth, "pass_ms": stats(walls), "llama_decode_ms": stats(decodes)})
        print(f"T={n:3d} depth {depth}  pass {rows[-1]['pass_ms']['median']:8.3f} ms  "
              f"llama_decode {rows[-1]['llama_decode_ms']['median']:8.3f} ms", flush=True)
    return rows


def _depth(parents: Sequence[int]) -> int:
    d = [0] * len(parents)
    for i in range(1, len(parents)):
        d[i] = d[parents[i]] + 1
    return max(d)


def first_child_path(parents: Sequence[int], length: int) -> list[int]:
    """Node ids of the tree's first-child chain from the root, at most `length` nodes."""
    path = [0]
    while len(path) < length:
        nxt = next((i for i in range(1, len(parents)) if parents[i] == path[-1]), None)
        if nxt is None:
            break
        path.append(nxt)
    return path


def draft_costs(backend: Any, net: Any, clock: "Timed", prompt: list[int], fwd: Any, shapes: Sequence[tuple[int, int, int]],
                warmup: int, repeats: int, accepted: int) -> list[dict[str, Any]]:
    """One row per (depth, topk, total): HeadDrafter.propose's wall time after a verified, committed step."""
    from homespec.speculative.drafters.eagle3 import HeadDrafter

    rows = []
    n0 = backend.n_past
    for depth, topk, total in shapes:
        net.reset(0)
        net._next_lane = 0  # one lane, taken again by each shape's drafter
        drafter = HeadDrafter(net, depth=depth, topk=topk, total=total, width=len(net.info.layers) * backend.hidden_size)
        drafter.begin(prompt, fwd)
        context, root = list(prompt), int(np.argmax(fwd.logits[-1]))
        walls, process, calls, written = [], [], [], []
        clock.native = getattr(net, "native_tree", None)  # a tree grown in one call: its decodes count too
        for r in range(warmup + 1 + repeats):  # the first draft writes the whole prompt: a warm-up
            clock.reset()
            t0 = time.perf_counter()
            tree = drafter.propose(root, context)
            wall = time.perf_counter() - t0
            clock.add_native()
            if r > warmup:
                walls.append(wall), process.append(clock.process_s), calls.append(clock.process_calls)
            tokens, parents = list(tree.tokens), list(tree.parents)
            out = backend.verify(tokens, parents)
            path = first_child_path(parents, accepted)
            backend.commit(path)
            drafter.accept([tokens[i] for i in path], out.features[path], int(np.argmax(out.logits[path[-1]])))
            context += [tokens[i] for i in path]
            root = int(np.argmax(out.logits[path[-1]]))
            written.append(len(path))
        backend.rollback(backend.n_past - n0)  # back to the prompt for the next shape
        rows.append({"depth": depth, "topk": topk, "total": total, "draft_ms": stats(walls),
                     "llama_process_ms": stats(process), "head_calls": statistics.median(calls),
                     "entries_written_per_draft": statistics.median(written)})
        print(f"draft depth {depth} top-{topk} {total:2d} nodes  {rows[-1]['draft_ms']['median']:8.3f} ms  "
              f"(head's graph calls {rows[-1]['llama_process_ms']['median']:.3f} ms in {rows[-1]['head_calls']:.0f} calls)",
              flush=True)
    return rows


def draft_shapes(depths: Sequence[int]) -> list[tuple[int, int, int]]:
    """Chains (top-1, depth + 1 nodes) and trees (top-8, as many nodes as the depth holds, at most 48)."""
    chains = [(d, 1, d + 1) for d in depths]
    trees = [(d, TOPK_TREE, min(TREE_TOTAL, 1 + TOPK_TREE * d)) for d in depths]
    return chains + trees


def device_info(ll: Any, backend: Any) -> dict[str, Any]:
    return {"gpu_offload": bool(ll.llama_supports_gpu_offload()),
            "system_info": ll.llama_print_system_info().decode(errors="replace").strip(),
            "flash_attn": bool(getattr(backend, "flash_attn_active", False))}


def _ints(text: str, flag: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"error: {flag} takes a comma list of whole numbers, got {text!r}\nhint: e.g. {flag} 1,2,4") from None
    if not out or min(out) < 1:
        raise SystemExit(f"error: {flag} needs positive numbers\nhint: e.g. {flag} 1,2,4")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--head", required=True)
    ap.add_argument("--ctx", type=int, default=1024, help="prompt tokens before the measured passes")
    ap.add_argument("--nodes", default="1,2,4,8,16,32,48,64")
    ap.add_argument("--depths", default="1,2,3,4,5,6")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--accepted", type=int, default=3, help="tokens committed after each draft (the root included)")
    ap.add_argument("--gpu-layers", type=int, default=-1, help="-1: every layer on the GPU (0 on a CPU build)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    sizes, depths = _ints(a.nodes, "--nodes"), _ints(a.depths, "--depths")

    import llama_cpp

    from homespec.backends.llamacpp.backend import LlamaCppBackend
    from homespec.backends.settings import BackendSettings

    from homespec.backends.llamacpp.head import LlamaCppHead, read_head_file
    from homespec.plan.memory import head_cells

    from benchmarks.suites.host_step import Timed, time_graph_calls

    clock = Timed()  # the target's llama_decode apart from the head's graph calls
    time_graph_calls(llama_cpp, clock)
    t0 = time.perf_counter()
    widest = max(*sizes, TREE_TOTAL)  # the curve's trees and the drafts' (verified between drafts)
    margin = a.accepted * (a.warmup + 1 + a.repeats) + 2 * widest + 64
    settings = BackendSettings(n_ctx=a.ctx + margin, n_gpu_layers=a.gpu_layers, n_threads=a.threads)
    backend = LlamaCppBackend(a.target, settings, max_leaves=widest - 1)
    clock.target = backend._ctx
    info = read_head_file(a.head, backend.n_vocab)
    backend.set_feature_layers(info.layers)
    net = LlamaCppHead(info, backend, lanes=1, topk=TOPK_TREE, n_threads=a.threads,
                       cells_per_lane=head_cells(backend.max_context, info.window, info.sinks, max(depths) + 2, TOPK_TREE))
    load_s = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    prompt = rng.integers(0, backend.n_vocab, size=a.ctx).tolist()
    fwd = backend.prefill(prompt)
    print(f"{Path(a.target).name} + {Path(a.head).name}: loaded in {load_s:.1f} s; torch imported: {sys.modules.get('torch') is not None}",
          flush=True)
    curve = target_curve(backend, clock, sizes, a.warmup, a.repeats, rng)
    drafts = draft_costs(backend, net, clock, prompt, fwd, draft_shapes(depths), a.warmup, a.repeats, a.accepted)
    result = {"target": a.target, "head": a.head, "context": a.ctx, "warmup": a.warmup, "repeats": a.repeats,
              "accepted": a.accepted, "gpu_layers": a.gpu_layers, "load_s": round(load_s, 2),
              "device": device_info(llama_cpp, backend), "timer": "perf_counter", "curve": curve, "drafts": drafts}
    net.close()
    backend.close()
    if a.json:
        Path(a.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
