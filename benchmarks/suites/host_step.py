"""Host time per engine step outside llama_decode: what homespec's Python costs around each target
pass (batch filling, ctypes, reading the logits, drafting, verification, commit, detokenising,
handing the step to its consumer), one lane on a llama.cpp target.

    python -m benchmarks host_step [--shapes plain,chain5] [--steps 150] [--rounds 3]
        [--threads 2] [--accept all|none] [--drafter oracle|head] [--head GGUF] [--model GGUF]
        [--gpu-layers N] [--rollback N] [--grow native,levels] [--fixed-threads] [--off-core] [--tiny] [--json FILE]

Each step is one Engine.step() (the same engine chat and generate run, with its detokenizer), timed
with time.perf_counter; llama_decode is wrapped with the same clock, and the host time of a step
is the difference. A shape is the tree every step verifies:

* `plain`: the root alone, plain decoding's 1-token step;
* `chainN`: the root and N-1 drafted tokens in a chain;
* `treeN`: an N-node EAGLE-2 style tree (`TREE_DEPTH` levels, `TREE_TOPK` children per node,
  grown by homespec.speculative.tree.build_dynamic_tree from seeded random log-probs).

The drafts come from an oracle (no model runs for them, so their own cost is only the tree's
bookkeeping): with `--accept all` the first child at every level is the target's own greedy next
token, read from a plain run of the same prompt beforehand, so a chain's whole path is accepted and
each step emits N tokens; with `--accept none` no drafted token is right. Per round the script
prints the median step, the median time inside llama_decode, and the host time (median and mean)
split into the lane's own work ("draft": Step.t_draft, which is drafting, verification, the commit and
the drafter's bookkeeping, less the head's graph calls and the llama_decode a commit makes when it
re-decodes a kept path's tail), the rest of the target pass outside llama_decode (Step.t_verify less
the pass's llama_decode: batch filling, sequence ids, logits and features out of llama.cpp's buffers)
and the rest of the step (the engine around them: scheduling, responses). Run alternating rounds
against another checkout, or `--grow native,levels`, to compare.

`--drafter head` drafts with the real EAGLE head in llama.cpp instead (`--head GGUF`, else the shipped head
beside the embedded model; `backends/llamacpp/head.py`, the guard off so every step drafts the shape: `chainN` a chain of N-1,
`treeN` the planner's 6-deep, 8-wide tree of N nodes); the head's graph calls (its own
llama_decode and llama_encode calls) are timed like the target's llama_decode, and the host time leaves both out: Python, ctypes, batch filling, the tree's bookkeeping,
verification.

On a shared machine the host time read around a real llama_decode moves with the load (the
decode's threads and the neighbours' compete with the Python for the cores); `--stub-decode`
replaces llama_decode with a call that returns at once, after the prompt's prefill and the answer
are computed for real, so a step is host work alone (the logits read are the last real decode's).
Its p10 (the 10th percentile of the steps) is the steadiest figure for comparing two checkouts.

`--off-core` (with `--threads 1`) runs every graph call on a worker thread pinned to another core while
the host thread polls on its own, as a CUDA host thread spins on its stream (benchmarks/off_core.py): the
compute leaves the host thread's core, its hand-over is counted with the calls. Here it changes nothing:
the weights still stream through the L3 both cores share (docs/results/2026-12-07/llamacpp/host-step/off-core.txt).

`--tiny` measures on a tiny target instead of SmolLM2: a random-weight GGUF of SmolLM2's vocabulary, 8 layers
of 64 (F16, 6.9 MB; tests/tiny_models.py) and, with `--drafter head`, an EAGLE-3 head of its width (RedHat's
Qwen3-8B head's layout at that width, tests/published_heads.py, converted to an eagle3 GGUF as a user's head
is), both generated into a temporary folder. Its decode computes little and reads 6.9 MB of weights, so the host
work runs in caches much as a GPU target leaves them (the logits rows written per pass, 48 x 49,152 floats for a
48-node tree, are the one large write, as a GPU's copy of them back is); SmolLM2's 80 MB of weights stream
through the L3 at every decode instead. Random weights accept almost no draft: `--drafter head` commits one
token a step, `--drafter oracle --accept all` a whole path.

On a hybrid model (a recurrent state beside attention: Qwen3.5, Qwen3-Next) the target is loaded
with `--rollback N` per-token snapshots (default: the widest chain's drafts, as a run drafting that
chain loads it), and the two calls that give rejected drafts back (backends/llamacpp/rollback.py)
are timed like llama_decode: `save` (before_verify: the state copied on the device before a chain
its snapshots do not cover: every chain under replay) and `undo` (keep: the snapshot selected, or
the copy restored and the kept tokens decoded again). With `--accept none` every step gives its
drafts back: undo / the plain step's time is the per-step cost of undoing a rejected draft.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from benchmarks.harness import add_model, add_rounds, add_threads, smollm2, usage_error
from benchmarks.off_core import OffCore
from benchmarks.results import Result

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."
TREE_DEPTH, TREE_TOPK = 6, 8  # the planner's default tree (homespec.plan.settings)


@dataclass
class Timed:
    """What the wrapped clocks add up, reset per step."""

    decode_s: float = 0.0
    repair_s: float = 0.0  # the target's calls after the step's pass: a commit re-decoding a kept path's tail
    target_calls: int = 0
    process_s: float = 0.0  # the head's graph calls: its llama_decode and llama_encode (--drafter head)
    process_calls: int = 0
    save_s: float = 0.0  # a recurrent state saved before a chain (rollback.before_verify)
    undo_s: float = 0.0  # rejected drafts given back by a recurrent state (rollback.keep)
    target: object = None  # the target's llama_context: its calls are llama_decode's, any other's the head's
    native: object = None  # a head's NativeTree (a tree grown in one call): its levels' decodes are the head's too
    steps: list[dict] = field(default_factory=list)
    _native0: tuple[float, int] = (0.0, 0)

    def reset(self) -> None:
        self.decode_s = self.repair_s = self.process_s = self.save_s = self.undo_s = 0.0
        self.process_calls = self.target_calls = 0
        self._native0 = (self.native.decode_s, self.native.decodes) if self.native else (0.0, 0)

    def add_native(self) -> None:
        """Count the decodes a tree grown in one call made since reset() (the C++ loop calls llama_decode
        itself, past the wrapped module) among the head's graph calls."""
        if self.native:
            self.process_s += self.native.decode_s - self._native0[0]
            self.process_calls += self.native.decodes - self._native0[1]


def time_graph_calls(ll, t: Timed, *, stub: bool = False, off=None) -> None:
    """Wrap llama_cpp's llama_decode and llama_encode (the backends and the head call them through the
    module): a call on `t.target` adds to t.decode_s (and returns at once with `stub`), any other
    context's (the head's) to t.process_s and t.process_calls. Each call is timed up to its outputs
    (llama_synchronize: on a GPU llama_decode returns while the device still computes, and the wait
    would land in whichever host read came next), as llama_homespec_grow_tree times its own levels."""

    sync = ll.llama_synchronize

    def timed(real):
        def work(ctx, batch):
            rc = real(ctx, batch)
            sync(ctx)  # a GPU's llama_decode returns before its outputs: their wait is the call's, not host time
            return rc

        run = work if off is None else off.wrap(work)  # --off-core: on the worker's core

        def call(ctx, batch):
            mine = ctx is t.target
            t0 = time.perf_counter()
            rc = 0 if stub and mine else run(ctx, batch)
            dt = time.perf_counter() - t0
            if mine:
                t.decode_s += dt
                t.repair_s += dt if t.target_calls else 0.0  # the first is the step's pass
                t.target_calls += 1
            else:
                t.process_s += dt
                t.process_calls += 1
            return rc
        return call

    ll.llama_decode, ll.llama_encode = timed(ll.llama_decode), timed(ll.llama_encode)


def shape_parents(shape: str, seed: int = 0) -> list[int]:
    """The parent array of a shape name: plain, chainN or treeN."""
    if shape == "plain":
        return [-1]
    if shape.startswith("chain"):
        n = int(shape[5:])
        return list(range(-1, n - 1))
    if shape.startswith("tree"):
        from homespec.speculative.tree import build_dynamic_tree

        n = int(shape[4:])
        rng = np.random.default_rng(seed)

        def step(tokens: np.ndarray, rows: np.ndarray, depth: int) -> np.ndarray:
            x = rng.standard_normal((tokens.shape[0], 64))
            return x - np.log(np.exp(x).sum(-1, keepdims=True))

        return build_dynamic_tree(step, 0, depth=min(TREE_DEPTH, n - 1), topk=TREE_TOPK, total=n).parents.tolist()
    raise SystemExit(f"error: unknown shape {shape!r} (plain, chainN, treeN)")


class OracleDrafter:
    """Proposes a fixed tree shape every step; along first children it places the target's own
    greedy answer (accept='all') or a wrong token (accept='none'); other nodes are wrong tokens."""

    name = "oracle"

    def __init__(self, parents: list[int], answer: list[int], prompt_len: int, vocab: int, accept: str):
        from homespec.contracts.drafter import DraftShape

        self.parents, self.answer, self.prompt_len, self.vocab = parents, answer, prompt_len, vocab
        self.right = accept == "all"  # draft the right tokens along first children
        self.depth = depth = [0] * len(parents)
        for i in range(1, len(parents)):
            depth[i] = depth[parents[i]] + 1
        first = {}
        for i in range(1, len(parents)):
            first.setdefault(parents[i], i)
        self.first_child = set(first.values())  # on the root's first-child path when its parent is
        self._shape = DraftShape(max(1, max(depth)), max(1, max((parents.count(p) for p in set(parents[1:])), default=1)),
                                 max(2, len(parents)))

    def begin(self, prompt, forward, *, kept=0) -> None:
        pass

    def trim(self, keep: int) -> int:
        return keep

    def offers(self, root, context):
        from homespec.contracts.drafter import Offer

        return (Offer(self.name),)

    def propose(self, root: int, context):
        from homespec.contracts.tree import DraftTree

        done = len(context) + 1 - self.prompt_len  # answer tokens emitted so far, the root included
        tokens = [root]
        on_path = [True]
        for i in range(1, len(self.parents)):
            p = self.parents[i]
            path = on_path[p] and i in self.first_child
            on_path.append(path)
            k = done + self.depth[i] - 1
            right = self.answer[k] if k < len(self.answer) else 0
            tokens.append(right if path and self.right else (right + 1 + i) % self.vocab)
        return DraftTree.of(tokens, self.parents)

    def accept(self, tokens, features, next_token) -> None:
        pass

    def reset(self) -> None:
        pass

    @property
    def shape(self):
        return self._shape

    def limits(self):
        from homespec.contracts.drafter import ShapeLimits

        return ShapeLimits()

    def set_shape(self, depth: int, total: int):
        return self._shape


def head_drafter(net, backend, shape: str):
    """The EAGLE drafter in llama.cpp, forced to `shape` (a chain of N-1 or a 6-deep, 8-wide tree of N)."""
    from homespec.speculative.drafters.eagle3 import HeadDrafter

    n = int(shape[5:] if shape.startswith("chain") else shape[4:])
    depth, topk = (n - 1, 1) if shape.startswith("chain") else (TREE_DEPTH, TREE_TOPK)
    net.reset(0)
    net._next_lane = 0  # one lane, taken again by each round's drafter
    return HeadDrafter(net, depth=depth, topk=topk, total=n, width=3 * backend.hidden_size)


def open_head(backend, topk: int, path: str | None = None):
    """An eagle3 GGUF in llama.cpp beside `backend` (one lane): `path`, else the shipped head converted."""
    from homespec.backends.llamacpp.head import LlamaCppHead, read_head_file
    from homespec.backends.llamacpp.head_convert import head_gguf
    from homespec.embedded import DEFAULT_HEAD
    from homespec.plan.memory import head_cells

    info = read_head_file(path or head_gguf(DEFAULT_HEAD, backend.model_path).path, backend.n_vocab)
    backend.set_feature_layers(info.layers)
    cells = head_cells(backend.max_context, info.window, info.sinks, TREE_DEPTH + 2, topk)
    return LlamaCppHead(info, backend, lanes=1, cells_per_lane=cells, topk=topk)


def measure(backend, prompt: list[int], answer: list[int], shape: str, steps: int, accept: str, t: Timed,
            head=None) -> dict:
    """One round: `steps` engine steps of `shape` after the prompt's prefill."""
    from homespec.engine.api import EngineRequest
    from homespec.engine.assemble import RunParts
    from homespec.engine.core import Engine
    from homespec.engine.lanes import OneLane
    from homespec.engine.options import RunOptions
    from homespec.engine.responses import StepFigures

    parents = shape_parents(shape)
    if head is not None and len(parents) > 1:
        drafter = head_drafter(head, backend, shape)
    else:
        drafter = OracleDrafter(parents, answer, len(prompt), backend.n_vocab, accept) if len(parents) > 1 else None
    backend.reset()
    parts = RunParts(OneLane(backend), [drafter], None, backend.model_path, None,
                     drafter.shape if drafter else None, RunOptions(), backend=backend, stop_at_eos=False)
    engine = Engine(parts, queue_size=1, cache_prompt=False)
    handle = engine.submit(EngineRequest(tuple(prompt), max_tokens=10**6))
    engine.step()  # the prefill
    handle.take()
    rows = []
    t.native = getattr(head, "native_tree", None)
    for _ in range(steps):
        t.reset()
        t0 = time.perf_counter()
        engine.step()
        wall = time.perf_counter() - t0
        t.add_native()
        figs = [r.step for r in handle.take()[0] if isinstance(r, StepFigures)]
        s = figs[-1]
        rows.append({"wall": wall - t.process_s, "decode": t.decode_s, "draft": s.t_draft - t.process_s - t.repair_s,
                     "process": t.process_s, "pass_other": s.t_verify - (t.decode_s - t.repair_s),
                     "emitted": len(s.tokens), "accepted": s.accepted, "save": t.save_s, "undo": t.undo_s})
    handle.cancel()
    engine.step()
    return summarise(shape, rows)


def summarise(shape: str, rows: list[dict]) -> dict:
    ms = lambda xs: round(statistics.median(xs) * 1e3, 3)  # noqa: E731
    host = [r["wall"] - r["decode"] for r in rows]
    rest = [h - r["draft"] - r["pass_other"] for h, r in zip(host, rows)]
    return {"shape": shape, "steps": len(rows), "step_ms": ms([r["wall"] for r in rows]),
            "decode_ms": ms([r["decode"] for r in rows]), "host_ms": ms(host),
            "host_mean_ms": round(statistics.fmean(host) * 1e3, 3),
            "host_p10_ms": round(float(np.percentile(host, 10)) * 1e3, 3),
            "draft_ms": ms([r["draft"] for r in rows]), "pass_other_ms": ms([r["pass_other"] for r in rows]),
            "head_process_ms": ms([r.get("process", 0.0) for r in rows]),
            "rest_ms": ms(rest), "tokens_per_step": round(statistics.fmean(r["emitted"] for r in rows), 3),
            "save_ms": ms([r["save"] for r in rows]), "undo_ms": ms([r["undo"] for r in rows])}


def time_rollback(t: Timed) -> None:
    """Time the recurrent state's save and undo (the backends call them through the module)."""
    from homespec.backends.llamacpp import rollback

    real_save, real_keep = rollback.before_verify, rollback.keep

    def save(*args, **kw):
        t0 = time.perf_counter()
        real_save(*args, **kw)
        t.save_s += time.perf_counter() - t0

    def keep(*args, **kw):
        t0 = time.perf_counter()
        real_keep(*args, **kw)
        t.undo_s += time.perf_counter() - t0

    rollback.before_verify, rollback.keep = save, keep


def _dispatched(off: OffCore, fn, t: Timed):
    """fn on the --off-core worker, its hand-over there and back (two thread wake-ups) counted among the
    head's graph calls, as a decode's is: host time is the work the call does, not the hand-over."""
    inner = [0.0]

    def on_worker(*args):
        t0 = time.perf_counter()
        out = fn(*args)
        inner[0] = time.perf_counter() - t0
        return out

    run = off.wrap(on_worker)

    def call(*args):
        t0 = time.perf_counter()
        out = run(*args)
        t.process_s += time.perf_counter() - t0 - inner[0]
        return out

    return call


def _depth(parents: list[int]) -> int:
    d = [0] * len(parents)
    for i in range(1, len(parents)):
        d[i] = d[parents[i]] + 1
    return max(d)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--shapes", default="plain,chain5")
    ap.add_argument("--steps", type=int, default=150)
    add_rounds(ap, 3)
    add_threads(ap, 2)
    ap.add_argument("--accept", choices=("all", "none"), default="all")
    add_model(ap)
    ap.add_argument("--drafter", choices=("oracle", "head"), default="oracle",
                    help="oracle: fixed trees of the target's own tokens; head: the shipped EAGLE head in llama.cpp")
    ap.add_argument("--head", default=None, help="--drafter head: this eagle3 GGUF (default: the shipped head, converted)")
    ap.add_argument("--gpu-layers", type=int, default=0, help="target layers on the GPU (-1: all)")
    ap.add_argument("--grow", default="native",
                    help="--drafter head: native (a tree in one llama.cpp call, homespec's patch), levels (level by "
                         "level from Python), or native,levels: both, alternating within each round")
    ap.add_argument("--fixed-threads", action="store_true",
                    help="every llama_decode on --threads (no measured choice of fewer: backends/llamacpp/threads.py)")
    ap.add_argument("--stub-decode", action="store_true", help="llama_decode returns at once: host work alone")
    ap.add_argument("--off-core", action="store_true",
                    help="every graph call on a worker thread pinned to another core (with --threads 1): the host "
                         "thread's caches as a GPU target leaves them (benchmarks/off_core.py)")
    ap.add_argument("--tiny", action="store_true",
                    help="a tiny random-weight target (and head) instead of SmolLM2: the host work in caches the decode "
                         "leaves much as a GPU target does")
    ap.add_argument("--rollback", type=int, default=None,
                    help="a hybrid model's per-token snapshots (n_rs_seq; default: the widest chain's drafts)")


def tiny_pair(folder: Path, head: bool) -> tuple[str, str | None]:
    """--tiny's target in `folder` (tests/tiny_models.py: SmolLM2's vocabulary, 8 layers of 64, F16) and, with
    `head`, an eagle3 GGUF of its width: RedHat's Qwen3-8B EAGLE-3 layout reduced (tests/published_heads.py),
    converted by homespec as a user's head is."""
    from benchmarks.harness import use_tests

    use_tests()
    from published_heads import published, reduced, write_head
    from tiny_models import make_tiny_gguf

    from homespec.backends.llamacpp.head_convert import head_gguf

    target = make_tiny_gguf(folder / "tiny-F16.gguf", n_layer=8, n_embd=64, ftype="F16")
    if not head:
        return str(target), None
    weights = write_head(folder / "head", reduced(published("redhat-qwen3-8b")))
    return str(target), str(head_gguf(weights, target, dtype="f16", cache_dir=folder / "cache").path)


def run(a: argparse.Namespace) -> Result:
    if a.off_core and a.threads != 1:
        usage_error("--off-core runs each graph call on one other core", "add --threads 1")
    if not a.tiny:
        return measure_all(a)
    if a.model or a.head:
        usage_error("--tiny makes its own target and head", "drop --model and --head, or --tiny")
    with tempfile.TemporaryDirectory(prefix="homespec-tiny-") as d:
        a.model, a.head = tiny_pair(Path(d), head=a.drafter == "head")
        result = measure_all(a)
    result.detail.update(tiny=True, model="tiny-F16.gguf (generated: --tiny)", head="generated (--tiny)" if a.head else None)
    return result


def measure_all(a: argparse.Namespace) -> Result:
    """Every round of every shape on the target `a` names (SmolLM2 by default)."""
    import llama_cpp

    from homespec.backends.llamacpp.backend import LlamaCppBackend
    from homespec.backends.settings import BackendSettings
    from homespec.engine.run import decode
    from homespec.session.encode import encode_prompt
    from homespec.speculative.steps import Limits

    if a.stub_decode and a.drafter == "head":
        raise SystemExit("error: the head reads the target's layer features, which a stubbed llama_decode does not "
                         "compute; hint: drop --stub-decode, or use --drafter oracle")
    shapes = a.shapes.split(",")
    widest = max(len(shape_parents(s)) for s in shapes)
    # tokens a fully accepted step emits: the head's trees are TREE_DEPTH deep, the oracle's as its random shape
    longest = max(TREE_DEPTH if a.drafter == "head" and s.startswith("tree") else _depth(shape_parents(s))
                  for s in shapes) + 1
    path = a.model or str(smollm2())
    n_answer = a.steps * longest + 16
    from homespec.engine.options import model_traits

    recurrent = model_traits(path).recurrent
    rollback = (widest - 1 if a.rollback is None else a.rollback) if recurrent else 0
    settings = BackendSettings(n_ctx=1 << (n_answer + 256).bit_length(), n_threads=a.threads,
                               n_gpu_layers=a.gpu_layers, rollback=rollback, adapt_threads=not a.fixed_threads)
    backend = LlamaCppBackend(path, settings, max_leaves=1 if recurrent else max(1, widest - 1))
    prompt = encode_prompt(backend.tokenizer, [PROMPT], chat=True)
    if a.stub_decode or a.drafter == "head":  # no oracle: its tokens only need to exist
        answer = [0] * n_answer
    else:
        answer = [tok for s in decode(backend, None, prompt, limits=Limits(max_tokens=n_answer, stop_at_eos=False))
                  for tok in s.tokens]

    t = Timed()
    time_rollback(t)
    t.target = backend._ctx
    off = OffCore() if a.off_core else None
    time_graph_calls(llama_cpp, t, stub=a.stub_decode, off=off)
    head = open_head(backend, max(TREE_TOPK, 1), a.head) if a.drafter == "head" else None
    if off is not None and head is not None and head.native_tree is not None:  # its calls decode inside C
        nt = head.native_tree
        nt._fn = _dispatched(off, nt._fn, t)
        nt._draft = None if nt._draft is None else _dispatched(off, nt._draft, t)
    n_rs = backend._ll.llama_n_rs_seq(backend._ctx)
    mode = f", recurrent state: {backend.rollback_mode} (n_rs_seq {n_rs})" if recurrent else ""
    print(f"{path.rsplit('/', 1)[-1]}{mode}, {a.threads} threads, {a.steps} steps per round, accept {a.accept}"
          f"{', llama_decode stubbed' if a.stub_decode else ''}"
          f"{f', graph calls on core {off.work_core} (host thread on core {off.host_core})' if off else ''}; torch imported: {sys.modules.get('torch') is not None}", flush=True)
    results = []
    grows = a.grow.split(",") if head is not None else ["-"]
    native = head.native_tree if head is not None else None
    if native is None and "native" in grows:
        print("this llama.cpp lacks llama_homespec_grow_tree (homespec's patch): trees grow level by level", flush=True)
    for r in range(a.rounds):
        for shape, grow in [(s, g) for s in shapes for g in grows]:
            if head is not None:
                head.native_tree = native if grow == "native" else None
            row = measure(backend, prompt, answer, shape, a.steps, a.accept, t, head) | {"round": r + 1, "grow": grow}
            results.append(row)
            print(f"round {r + 1} {shape:8}{'' if grow == '-' else ' ' + grow:8} step {row['step_ms']:7.3f} ms  llama_decode {row['decode_ms']:7.3f} ms  "
                  f"host {row['host_ms']:6.3f} ms (p10 {row['host_p10_ms']:.3f}, mean {row['host_mean_ms']:.3f}): draft {row['draft_ms']:.3f}, "
                  f"pass outside llama_decode {row['pass_other_ms']:.3f}, rest {row['rest_ms']:.3f}; "
                  f"head's graph calls {row['head_process_ms']:.3f} ms; "
                  f"recurrent state: save {row['save_ms']:.3f} ms, undo {row['undo_ms']:.3f} ms; "
                  f"{row['tokens_per_step']:.2f} tokens/step", flush=True)
    backend_mode = backend.rollback_mode
    backend.close()
    return Result(rows=results, detail={"model": path, "threads": a.threads, "accept": a.accept, "drafter": a.drafter,
                                        "head": a.head, "rollback_mode": backend_mode, "n_rs_seq": n_rs,
                                        "gpu_layers": a.gpu_layers, "steps": a.steps})
