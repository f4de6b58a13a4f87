"""The verification-cost curve of homespec's torch target at a realistic size, and the speed-up it predicts.

A target pass reads every weight once whatever the weights hold, so its cost depends on the
shape, not the values: this script builds a catalogue model's shape (default Llama-3.1-8B) with
random weights made on the device, in bf16, and times with homespec's own code

* a verify pass of a T-node draft tree (TorchBackend.verify: tree attention through
  LlamaModel.forward, feature capture on) for each T in --nodes, after --context committed tokens;
* committing the tree's deepest path (LlamaModel.commit_path: KV compaction through
  homespec.kernels) and greedy acceptance as the loop runs it (speculative.verify.verify_greedy:
  numpy on the host over the logits the backend handed out; the verify pass's time includes
  their copy off the device);
* one draft round of an EAGLE-3 head at the catalogue head's width (Eagle3Drafter.propose) for
  each draft shape the shipped head's acceptance.json records, and for the planner's default.

The costs and the shipped head's recorded acceptance then give the speed-up the planner's speed
model predicts (docs/planner.md, "Speed": spec tok/s = tau / (t_forward(T) + t_draft), plain
tok/s = 1 / t_forward(1)), beside what `homespec plan` estimates for the same model and GPU.

GPU timings use CUDA events around each pass (the device timeline, host launch gaps included);
on a CPU perf_counter. `--tiny` shrinks the measured model so the CPU can run every code path
in seconds (the planner side still plans the full catalogue model).

    python scripts/gpu_cost_curve.py --json cost-curve.json                 # on the GPU machine
    python scripts/gpu_cost_curve.py --tiny --device cpu --json /tmp/c.json # the CPU dry run
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from homespec.errors import HomespecError, UsageError  # noqa: E402

DEFAULT_NODES = (1, 2, 4, 8, 16, 32, 64)
PLANNER_SHAPE = (7, 10, 60)  # homespec plan's default draft: depth, top-k, nodes (plan.api.make_plan)
SYNTHETIC_VOCAB = 64  # log-probs of the seeded stand-in drafter that shapes the measured trees
TREE_DEPTH, TREE_TOPK = 6, 8  # the trees of the curve: EAGLE-2 dynamic trees of this depth / width
_DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


@dataclass(frozen=True, slots=True)
class Shape:
    """What is measured: the target's and the head's widths (catalogue, or shrunk with --tiny)."""

    name: str
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_vocab: int
    rope_theta: float
    head_n_embd: int
    head_n_head: int
    head_n_head_kv: int
    head_dim_draft: int
    head_n_ff: int
    draft_vocab: int


# --- shapes ------------------------------------------------------------------------------------


def catalogue_shape(model: str, head_dir: Path, *, tiny: bool) -> Shape:
    """The catalogue model, with `head_dir`'s head when it was made for this target's width and
    vocabulary (the shipped head for SmolLM2), else the catalogue's draft for it. `tiny` keeps
    the proportions that matter for code paths (GQA grouping, a draft vocabulary below the
    target's) at a few thousand weights."""
    from homespec.catalog import load_catalog

    cat = load_catalog()
    spec = cat.model(model)
    head = _head_shape(head_dir, spec.n_embd, spec.n_vocab)
    if head is None:
        d = cat.draft_for(spec)
        if d is None:
            raise UsageError(f"{model} has no draft head in the catalogue", hint="pick a model with an EAGLE head, e.g. llama-3.1-8b")
        head = (d.n_embd, d.n_head, d.n_head_kv, d.head_dim, d.n_ff, d.draft_vocab)
    full = Shape(spec.name, spec.n_layer, spec.n_embd, spec.n_head, spec.n_head_kv, spec.head_dim, spec.n_ff,
                 spec.n_vocab, float(spec.rope_theta or 10000.0), *head)
    if not tiny:
        return full
    group = max(1, full.n_head // full.n_head_kv)
    return replace(full, name=full.name + " (tiny)", n_layer=4, n_embd=64, n_head=2 * group, n_head_kv=2,
                   head_dim=64 // (2 * group), n_ff=128, n_vocab=512, head_n_embd=64, head_n_head=2 * group,
                   head_n_head_kv=2, head_dim_draft=64 // (2 * group), head_n_ff=128, draft_vocab=256)


def _head_shape(head_dir: Path, n_embd: int, n_vocab: int) -> tuple[int, ...] | None:
    from homespec.nets.eagle3 import Eagle3Config

    try:
        c = Eagle3Config.from_dict(json.loads((head_dir / "config.json").read_text()), str(head_dir))
    except (OSError, ValueError, HomespecError):
        return None
    if (c.target_hidden_size, c.vocab_size) != (n_embd, n_vocab):
        return None
    return (c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.intermediate_size, c.draft_vocab_size)


def random_target(shape: Shape, device: str, dtype: torch.dtype, max_context: int, seed: int):
    """A LlamaModel of `shape` with N(0, 1/fan_in) weights generated on `device` (seconds on a GPU
    for 8B parameters; the values do not change a pass's cost)."""
    from homespec.nets.config import LlamaConfig
    from homespec.nets.llama import LayerWeights, LlamaModel

    cfg = LlamaConfig(arch="llama", n_layer=shape.n_layer, n_embd=shape.n_embd, n_head=shape.n_head,
                      n_head_kv=shape.n_head_kv, head_dim=shape.head_dim, n_ff=shape.n_ff, n_vocab=shape.n_vocab,
                      rms_eps=1e-5, rope_theta=shape.rope_theta, max_context=max_context)
    gen = torch.Generator(device=device).manual_seed(seed)

    def w(rows: int, cols: int) -> torch.Tensor:  # [rows, cols]: a Linear of fan-in cols
        return torch.randn(rows, cols, generator=gen, device=device, dtype=dtype).mul_(cols ** -0.5)

    def ones(n: int) -> torch.Tensor:
        return torch.ones(n, device=device, dtype=dtype)

    h, q, kv, f = cfg.n_embd, cfg.n_head * cfg.head_dim, cfg.n_head_kv * cfg.head_dim, cfg.n_ff
    layers = [LayerWeights(attn_norm=ones(h), wq=w(q, h), wk=w(kv, h), wv=w(kv, h), wo=w(h, q), ffn_norm=ones(h),
                           w_gate=w(f, h), w_up=w(f, h), w_down=w(h, f)) for _ in range(cfg.n_layer)]
    return LlamaModel(cfg, w(cfg.n_vocab, h), layers, ones(h), w(cfg.n_vocab, h), max_context=max_context)


def random_head(shape: Shape, device: str, dtype: torch.dtype, seed: int):
    """An EAGLE-3.1 head at the catalogue head's width, its parameters created on `device`."""
    from homespec.nets.eagle3 import Eagle3Config, Eagle3Head

    cfg = Eagle3Config(hidden_size=shape.head_n_embd, num_attention_heads=shape.head_n_head,
                       num_key_value_heads=shape.head_n_head_kv, head_dim=shape.head_dim_draft,
                       intermediate_size=shape.head_n_ff, vocab_size=shape.n_vocab, draft_vocab_size=shape.draft_vocab,
                       target_hidden_size=shape.n_embd, rope_theta=shape.rope_theta, fc_norm=True, norm_output=True)
    torch.manual_seed(seed)
    with torch.device(device):
        head = Eagle3Head(cfg)
    return head.to(dtype=dtype).eval()


def tree_parents(nodes: int, seed: int = 0) -> list[int]:
    """An EAGLE-2 dynamic tree of `nodes` nodes (homespec.contracts.tree.build_dynamic_tree, depth 6,
    top-8) grown from seeded random draft log-probs: the layout a real draft of that size has."""
    from homespec.contracts.tree import build_dynamic_tree

    if nodes <= 1:
        return [-1]
    gen = torch.Generator().manual_seed(seed)

    def step(tokens, rows, depth: int):  # numpy in and out (homespec.contracts.tree.StepFn)
        return torch.log_softmax(torch.randn(tokens.shape[0], SYNTHETIC_VOCAB, generator=gen), dim=-1).numpy()

    tree = build_dynamic_tree(step, 0, depth=min(TREE_DEPTH, nodes - 1), topk=TREE_TOPK, total=nodes)
    return tree.parents.tolist()


# --- timing ------------------------------------------------------------------------------------


class Clock:
    """Milliseconds of a callable: CUDA events on a GPU (the device's timeline), else perf_counter."""

    def __init__(self, device: str):
        self.cuda = device.startswith("cuda")

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def ms(self, fn: Callable[[], object]) -> float:
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return float(start.elapsed_time(end))
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3


def _stats(xs: Sequence[float]) -> dict:
    return {"median": round(statistics.median(xs), 4), "min": round(min(xs), 4), "n": len(xs)}


def time_pass(backend, clock: Clock, parents: list[int], *, repeats: int, warmup: int) -> dict:
    """One T-node verify, its deepest path's commit (+ rollback), and the loop's greedy acceptance."""
    from homespec.contracts.tree import DraftTree, depths, path_to
    from homespec.speculative.verify import verify_greedy

    t = len(parents)
    tokens = [(7 * i + 3) % backend.n_vocab for i in range(t)]
    d = depths(parents).tolist()
    path = list(path_to(parents, max(range(t), key=lambda i: (d[i], -i))))
    tree = DraftTree.of(tokens, parents)
    verify, commit, accept = [], [], []
    for i in range(warmup + repeats):
        out = {}
        v = clock.ms(lambda: out.setdefault("fwd", backend.verify(tokens, parents)))
        a = clock.ms(lambda: verify_greedy(tree, out["fwd"].logits))  # logits [T, V] numpy on the host
        c = clock.ms(lambda: backend.commit(path))
        backend.rollback(len(path))
        if i >= warmup:
            verify.append(v)
            commit.append(c)
            accept.append(a)
    return {"nodes": t, "depth": max(d), "verify_ms": _stats(verify), "commit_ms": _stats(commit),
            "accept_ms": _stats(accept)}


def time_draft(backend, head, clock: Clock, prompt: list[int], shape: tuple[int, int, int], *,
               repeats: int, warmup: int) -> dict:
    """One Eagle3Drafter.propose() of (depth, topk, nodes) after `prompt` is committed."""
    from homespec.nets.eagle3_drafter import Eagle3Drafter

    depth, topk, total = shape
    drafter = Eagle3Drafter(head, backend, depth=depth, topk=topk, total=total, capacity=len(prompt) + depth * topk + 8)
    backend.reset()
    fwd = backend.prefill(prompt)
    drafter.begin(prompt, fwd)
    root = int(fwd.logits[-1].argmax())
    drafter.propose(root, prompt)  # the first one also writes the prompt's entries: not a round's cost
    times, sizes = [], []
    for i in range(warmup + repeats):
        out = {}
        ms = clock.ms(lambda: out.setdefault("tree", drafter.propose(root, prompt)))
        if i >= warmup:
            times.append(ms)
            sizes.append(out["tree"].size)
    return {"depth": depth, "topk": topk, "total": total, "nodes_drafted": max(sizes), "draft_ms": _stats(times)}


# --- the speed model ---------------------------------------------------------------------------


def speedup_from_costs(tau: float, plain_s: float, verify_s: float, draft_s: float) -> float:
    """The planner's speed model (docs/planner.md, "Speed"; homespec.plan.speed.estimate) with
    measured costs in place of its roofline: (tau / (verify + draft)) / (1 / plain)."""
    return tau * plain_s / (verify_s + draft_s)


def recorded_acceptance(head_dir: Path) -> list[dict]:
    """The shipped head's recorded shapes (homespec.formats.acceptance): depth, topk, total, tau."""
    from homespec.formats.acceptance import FILE

    try:
        data = json.loads((head_dir / FILE).read_text())
        return [{k: s[k] for k in ("depth", "topk", "total", "tau", "steps")} for s in data["shapes"] if s.get("steps")]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise HomespecError(f"{head_dir / FILE} cannot be read ({exc})", hint="pass --head DIR of a head with acceptance.json") from exc


def predictions(passes: dict[int, dict], drafts: dict[tuple, dict], shapes: list[dict]) -> list[dict]:
    """Measured costs + recorded acceptance -> predicted speed-up, per recorded draft shape."""
    plain = passes[1]["verify_ms"]["median"] + passes[1]["commit_ms"]["median"]
    out = []
    for s in shapes:
        key = (s["depth"], s["topk"], s["total"])
        p, d = passes[s["total"]], drafts[key]
        verify = p["verify_ms"]["median"] + p["commit_ms"]["median"]
        draft = d["draft_ms"]["median"]
        out.append({**s, "plain_ms": round(plain, 4), "verify_ms": round(verify, 4), "draft_ms": round(draft, 4),
                    "verify_ratio": round(verify / plain, 4),
                    "speedup": round(speedup_from_costs(s["tau"], plain, verify, draft), 4)})
    return out


def planner_estimates(model: str, gpu: str, backend: str, shapes: list[dict]) -> dict:
    """`homespec plan --model MODEL --gpu GPU`'s estimate (its default draft), and the same plan at
    each recorded shape with the head's tau put in the draft's place (what the planner would say
    of a head that accepts like the shipped one)."""
    from homespec.plan.api import make_plan
    from homespec.plan.fit import solve
    from homespec.plan.machine import machine_from_args
    from homespec.plan.settings import Settings
    from homespec.plan.suggest import advise
    from homespec.sources.resolve import resolve

    def est(plan) -> dict:
        e = plan.estimate
        return {"plain_ms": e.plain_ms, "verify_ms": e.verify_ms, "draft_ms": e.draft_ms, "tree_tokens": e.tree_tokens,
                "expected_tau": e.expected_tau, "speedup": e.speedup, "plain_tokens_per_s": e.plain_tokens_per_s,
                "spec_tokens_per_s": e.spec_tokens_per_s, "basis": e.basis}

    out = {"command": f"homespec plan --model {model} --gpu {gpu} --backend {backend}",
           "default": est(make_plan(model=model, gpu=gpu, backend=backend))}
    target = resolve(model).spec
    head = resolve(None, "draft", target=target).spec
    machine = machine_from_args(gpu)
    out["at_recorded_shapes"] = []
    for s in shapes:
        settings = Settings(backend=backend, n_ctx=8192, type_k="f16", type_v="f16", flash_attn=True, n_ubatch=512,
                            tree_tokens=s["total"], draft_depth=s["depth"], draft_topk=s["topk"])
        plan = advise(solve(target, replace(head, expected_tau=s["tau"]) if head else None, machine, settings))
        out["at_recorded_shapes"].append({"depth": s["depth"], "topk": s["topk"], "total": s["total"], "tau": s["tau"],
                                          **est(plan)})
    return out


# --- the run -------------------------------------------------------------------------------------


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="llama-3.1-8b-bf16", help="catalogue model whose shape is measured and planned")
    ap.add_argument("--gpu", default="h200", help="catalogue GPU for the planner's estimate")
    ap.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    ap.add_argument("--dtype", default="bf16", choices=sorted(_DTYPES))
    ap.add_argument("--nodes", default=",".join(map(str, DEFAULT_NODES)), help="tree sizes, comma separated")
    ap.add_argument("--context", type=int, default=1024, help="committed tokens before each timed pass")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--head", default=None, help="head directory whose acceptance.json is used (default: the shipped head)")
    ap.add_argument("--tiny", action="store_true", help="measure a shrunk model (CPU dry run); the planner still plans --model")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (1 is steadier on a busy CPU)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", dest="json_file", default=None, help="write the result here")
    return ap.parse_args(argv)


def _device(requested: str | None) -> str:
    if requested is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError("--device cuda but torch sees no CUDA device", hint="run on the GPU machine, or pass --device cpu --tiny")
    return requested


def measure(args: argparse.Namespace) -> dict:
    from homespec import kernels
    from homespec.backends.torch.backend import TorchBackend
    from homespec.embedded import DEFAULT_HEAD

    device, dtype = _device(args.device), _DTYPES[args.dtype]
    try:
        nodes = sorted({int(n) for n in args.nodes.split(",") if n.strip()})
    except ValueError:
        raise UsageError(f"--nodes {args.nodes!r} is not a comma list of integers", hint="e.g. --nodes 1,2,4,8") from None
    if not nodes or nodes[0] < 1 or args.context < 2 or args.repeats < 1 or args.warmup < 0:
        raise UsageError("--nodes, --context and --repeats must be positive", hint="e.g. --nodes 1,8,32 --context 1024")
    head_dir = Path(args.head) if args.head else DEFAULT_HEAD
    shapes = recorded_acceptance(head_dir)
    if args.threads:
        torch.set_num_threads(args.threads)
    draft_shapes = sorted({(s["depth"], s["topk"], s["total"]) for s in shapes} | {PLANNER_SHAPE})
    sizes = sorted(set(nodes) | {1} | {s[2] for s in draft_shapes})
    shape = catalogue_shape(args.model, head_dir, tiny=args.tiny)
    clock = Clock(device)
    t0 = time.perf_counter()
    model = random_target(shape, device, dtype, args.context + max(sizes) + 64, args.seed)
    backend = TorchBackend(model, f"random weights: {shape.name}")
    head = random_head(shape, device, dtype, args.seed + 1)
    clock.sync()
    build_s = time.perf_counter() - t0
    prompt = torch.randint(0, shape.n_vocab, (args.context,), generator=torch.Generator().manual_seed(args.seed)).tolist()
    drafts = {s: time_draft(backend, head, clock, prompt, s, repeats=args.repeats, warmup=args.warmup) for s in draft_shapes}
    passes = {t: time_pass(backend, clock, tree_parents(t, args.seed), repeats=args.repeats, warmup=args.warmup)
              for t in sizes}  # the committed context is the draft timing's prompt
    plain = passes[1]["verify_ms"]["median"]
    curve = [{**passes[t], "ratio": round(passes[t]["verify_ms"]["median"] / plain, 4)} for t in sizes]
    return {
        "shape": asdict(shape), "tiny": args.tiny, "device": _device_name(device), "dtype": args.dtype,
        "context": args.context, "repeats": args.repeats, "warmup": args.warmup,
        "weights_bytes": model.weight_bytes(), "build_s": round(build_s, 2),
        "kernels": kernels.selected(device), "timer": "cuda events" if clock.cuda else "perf_counter",
        "curve": curve, "ratios": {f"{r['nodes']}/1": r["ratio"] for r in curve if r["nodes"] in nodes},
        "drafts": list(drafts.values()), "acceptance": {"head": str(head_dir), "shapes": shapes},
        "predicted": predictions(passes, drafts, shapes),
        "planner": planner_estimates(args.model, args.gpu, "torch", shapes),
        "machine": {"platform": platform.platform(), "python": platform.python_version(), "torch": torch.__version__},
    }


def _device_name(device: str) -> str:
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    try:
        result = measure(args)
    except HomespecError as e:
        print(f"error: {e.message}", file=sys.stderr)
        if e.hint:
            print(f"hint: {e.hint}", file=sys.stderr)
        return e.exit_code
    text = json.dumps(result, indent=2) + "\n"
    if args.json_file:
        from homespec.atomic import write_text

        write_text(args.json_file, text)
    for row in result["curve"]:
        print(f"T={row['nodes']:>3}  verify {row['verify_ms']['median']:8.3f} ms  x{row['ratio']:.3f}  "
              f"commit {row['commit_ms']['median']:.3f} ms  accept {row['accept_ms']['median']:.3f} ms", file=sys.stderr)
    for p in result["predicted"]:
        print(f"shape {p['depth']}/{p['topk']}/{p['total']}: tau {p['tau']}  draft {p['draft_ms']:.3f} ms  "
              f"predicted speed-up x{p['speedup']:.3f}", file=sys.stderr)
    print(f"planner ({result['planner']['command']}): x{result['planner']['default']['speedup']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
