"""Run several methods side by side on one prompt set and collect comparable figures.

Every method gets its own session (drafter, guard) on one loaded target (homespec.bench.sessions);
prompts are interleaved (prompt 1 with every method, then prompt 2, ...) so that machine noise
hits all methods alike. Speedups are ratios measured in the same run, never against a number
from another run. With `repeat` > 1 each prompt runs that many rounds, the methods' order
reversed every other round, and its per-prompt record is the round with the median tokens/s: a
per-prompt ratio then survives one noisy round. With `lockstep` the methods run one prompt
together, a step of each in turn (homespec.session.lockstep), so a machine whose speed drifts over
seconds slows every method alike.
"""

from __future__ import annotations

import importlib.metadata
import math
import platform
import statistics
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator, Sequence

import homespec
from homespec.errors import UsageError
from homespec.bench.categories import by_category
from homespec.bench.sessions import MethodSessions, open_methods
from homespec.session import Finish, RunOptions, Session, final
from homespec.session.lockstep import lockstep as in_lockstep
from homespec.speculative.methods import METHOD_NAMES, find_method, method_entry
from homespec.engine.setup import set_up
from homespec.speculative.sampling import Sampler
from homespec.speculative.steps import Limits

POSITION_BIN = 64  # generated-token position bins for the stability view


@dataclass
class MethodStats:
    method: str
    bin_size: int = POSITION_BIN
    by_context: bool = False  # bin by absolute context position (long prompts) instead of generated position
    tokens: int = 0
    decode_s: float = 0.0
    passes: int = 0  # verification passes (prefill excluded)
    emitted_in_passes: int = 0
    step_latencies: list[float] = field(default_factory=list)
    depth_hits: list[int] = field(default_factory=list)  # steps that accepted >= d drafts, d = 1..
    spec_steps: int = 0
    outputs: list[list[int]] = field(default_factory=list)
    fallback_steps: int = 0  # steps the guard ran as plain decoding
    spec_emitted: int = 0  # tokens emitted by speculative steps (a draft was verified)
    per_prompt: list[dict] = field(default_factory=list)  # one record per prompt, in run order
    # position bin -> [tokens, seconds, passes]
    bins: dict[int, list[float]] = field(default_factory=dict)
    memory: dict | None = None
    guard: dict | None = None  # the stability guard's own account, when one ran
    draft: dict | None = None  # the drafter's shape (an EAGLE head's: depth, topk, nodes, window)
    # per drafter (auto has several): [sequence-steps it drafted, tokens drafted, tokens accepted]
    drafters: dict[str, list[int]] = field(default_factory=dict)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.decode_s if self.decode_s > 0 else 0.0

    @property
    def mean_accepted(self) -> float:
        return self.emitted_in_passes / self.passes if self.passes else 0.0

    @property
    def spec_tau(self) -> float | None:
        """Tokens per target pass over speculative steps only: the drafter's acceptance length,
        not diluted by the steps the guard ran plainly."""
        return self.spec_emitted / self.spec_steps if self.spec_steps else None

    def add(self, res, category: str | None = None) -> None:
        self.outputs.append(list(res.token_ids))
        tokens = max(0, len(res.token_ids) - 1)
        self.tokens += tokens
        self.decode_s += res.decode_s
        pos = len(res.prompt_token_ids) if self.by_context else 0
        spec = [0, 0]  # this prompt's speculative steps and their tokens
        fallback = 0
        for i, s in enumerate(res.steps):
            if i == 0:  # the prefill's token
                pos += len(s.tokens)
                continue
            self.passes += 1
            self.emitted_in_passes += len(s.tokens)
            self.step_latencies.append(s.t_step)
            if not s.speculative and method_entry(self.method).speculative:
                fallback += 1
            if s.speculative and s.draft_size > 0:
                self.spec_steps += 1
                self.spec_emitted += len(s.tokens)
                mine = self.drafters.setdefault(s.drafter or self.method, [0, 0, 0])
                mine[0], mine[1], mine[2] = mine[0] + 1, mine[1] + s.draft_size, mine[2] + s.accepted
                spec[0] += 1
                spec[1] += len(s.tokens)
                while len(self.depth_hits) < s.accepted:
                    self.depth_hits.append(0)
                for d in range(s.accepted):
                    self.depth_hits[d] += 1
            b = self.bins.setdefault(pos // self.bin_size, [0.0, 0.0, 0.0])
            b[0] += len(s.tokens)
            b[1] += s.t_step
            b[2] += 1
            pos += len(s.tokens)
        self.fallback_steps += fallback
        self.per_prompt.append({
            "category": category, "prompt_tokens": len(res.prompt_token_ids), "tokens": tokens, "decode_s": round(res.decode_s, 4),
            "tokens_per_s": round(tokens / res.decode_s, 3) if res.decode_s > 0 else 0.0,
            "spec_tau": round(spec[1] / spec[0], 4) if spec[0] else None, "spec_steps": spec[0],
            "spec_tokens": spec[1], "fallback_steps": fallback,
        })

    def merge_repeats(self, rounds: int) -> None:
        """Fold the last `rounds` per-prompt records (one prompt run `rounds` times) into one: the
        round with the median tokens/s (the lower middle one for an even count), with every
        round's rate kept in `repeats_tokens_per_s`. Totals, acceptance and outputs keep all rounds."""
        if rounds <= 1:
            return
        runs = self.per_prompt[-rounds:]
        del self.per_prompt[-rounds:]
        rates = [r["tokens_per_s"] for r in runs]
        mid = statistics.median_low(rates)
        rec = dict(runs[rates.index(mid)])
        rec["repeats_tokens_per_s"] = rates
        self.per_prompt.append(rec)

    def by_position(self) -> list[dict]:
        out = []
        for b in sorted(self.bins):
            tok, sec, passes = self.bins[b]
            out.append({"start": b * self.bin_size, "end": (b + 1) * self.bin_size,
                        "mean_accepted": round(tok / passes, 4) if passes else 0.0,
                        "tokens_per_s": round(tok / sec, 3) if sec else 0.0})
        return out

    def latency_ms(self, q: float) -> float:
        if not self.step_latencies:
            return 0.0
        xs = sorted(self.step_latencies)
        return xs[min(len(xs) - 1, int(q * len(xs)))] * 1e3


@dataclass
class BenchResult:
    methods: dict[str, MethodStats]
    backend: str
    model: str
    n_prompts: int
    max_tokens: int
    temperature: float
    wall_s: float
    machine: dict
    plan_estimate: dict | None = None
    repeat: int = 1  # rounds per prompt; per-prompt records are the median round
    lockstep: bool = False  # methods advanced a step each in turn
    targets_loaded: int = 1  # target models loaded: one shared by every method, one each with lockstep

    def speedup(self, method: str) -> float | None:
        base = self.methods.get("none")
        if base is None or base.tokens_per_s == 0:
            return None
        return self.methods[method].tokens_per_s / base.tokens_per_s

    def identical_fraction(self, method: str) -> float | None:
        base = self.methods.get("none")
        if base is None or not base.outputs:
            return None
        same = sum(1 for a, b in zip(self.methods[method].outputs, base.outputs) if a == b)
        return same / len(base.outputs)


def machine_info() -> dict:
    info = {"platform": platform.platform(), "python": platform.python_version(), "homespec": homespec.__version__}
    try:
        import psutil

        info["cpu_cores"] = psutil.cpu_count(logical=False) or psutil.cpu_count()
        info["ram_bytes"] = psutil.virtual_memory().total
    except Exception:  # pragma: no cover - psutil is a dependency
        pass
    # installed versions, read from the packages' metadata: importing torch to ask would load it
    # into a GGUF run that never uses it (and a CUDA llama.cpp build crashes beside it)
    for key, dist in (("torch", "torch"), ("llama_cpp", "llama_cpp_python")):
        try:
            info[key] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    return info


def run_bench(
    opts: RunOptions,
    methods: Sequence[str],
    prompts: Sequence[list[int]] | Callable[[Session], Sequence[list[int]]],
    *,
    max_tokens: int = 128,
    temperature: float = 0.0,
    seed: int = 0,
    progress: Callable[[str, int, int], None] | None = None,
    by_context: bool = False,
    bin_size: int = POSITION_BIN,
    repeat: int = 1,
    lockstep: bool = False,
    categories: Sequence[str] | None = None,
) -> BenchResult:
    bad = [m for m in methods if find_method(m) is None]
    if bad or not methods:
        raise UsageError(f"unknown method(s): {', '.join(bad) or '(none given)'}", hint=f"choose from: {', '.join(METHOD_NAMES)}")
    if repeat < 1:
        raise UsageError("--repeat must be at least 1", hint="e.g. --repeat 3 (median of three rounds per prompt)")
    methods = list(dict.fromkeys(methods))
    # every method's options checked and planned once, before the first model loads
    setups = {m: set_up(replace(opts, method=m)) for m in methods}
    t_start = time.perf_counter()
    # one loaded target for every method (homespec.bench.sessions); lockstep needs a cache each
    opened = open_methods(setups, shared=not lockstep)
    sessions = opened.sessions
    try:
        first = sessions[methods[0]]
        token_prompts = prompts(first) if callable(prompts) else prompts
        stats = {m: MethodStats(m, bin_size=bin_size, by_context=by_context) for m in methods}
        sampler = Sampler(temperature=temperature, seed=seed)
        limits = Limits(max_tokens=max_tokens)
        total = len(token_prompts) * len(methods) * repeat
        done = 0

        for i, ids in enumerate(token_prompts):
            for r in range(repeat):
                order = methods if r % 2 == 0 else list(reversed(methods))
                # each answer from an empty cache: the methods share one target, and a bench times decoding
                run_kw = dict(sampler=sampler, limits=limits, seed=seed + i, cache_prompt=False)
                for m, res in _answers(opened, order, ids, lockstep, run_kw):
                    stats[m].add(res, categories[i] if categories else None)
                    guard = sessions[m].guard  # the guard the session answered under (opts.guard)
                    if guard is not None:
                        stats[m].guard = guard.as_json()
                    done += 1
                    if progress:
                        progress(m, done, total)
            for m in methods:
                stats[m].merge_repeats(repeat)
        for m, s in sessions.items():
            stats[m].memory = s.memory()
            stats[m].draft = _draft_shape(s)
        plan_est = None
        if first.plan is not None:
            e = first.plan.estimate
            plan_est = {"plain_tokens_per_s": e.plain_tokens_per_s, "spec_tokens_per_s": e.spec_tokens_per_s,
                        "speedup": e.speedup, "planned_total_bytes": first.plan.total_bytes}
        return BenchResult(stats, opts.backend, first.model_path, len(token_prompts), max_tokens, temperature,
                           time.perf_counter() - t_start, machine_info(), plan_est, repeat, lockstep,
                           len(opened.targets))
    finally:
        opened.close()


def _answers(opened: MethodSessions, order: Sequence[str], ids: list[int], lockstep: bool,
             run_kw: dict) -> Iterator[tuple[str, Finish]]:
    """Each method's answer to one prompt, in `order`. A method's guard is made (and its costs
    measured) on the method's target, before its first answer (Session.stream)."""
    if lockstep:  # every method on its own target, a step of each in turn
        streams = [opened.sessions[m].stream(list(ids), **run_kw) for m in order]
        yield from zip(order, in_lockstep(streams))
        return
    for m in order:  # one after another on the shared target, each as the caller asks for it
        yield m, final(opened.use(m).stream(list(ids), **run_kw))


def _draft_shape(session: Session) -> dict | None:
    """What the EAGLE drafter drafts with; `window` None: full attention; `head`: its directory."""
    d = session.drafter
    if d is None or not hasattr(d, "window"):
        return None
    return {"depth": d.depth, "topk": d.topk, "nodes": d.total, "window": d.window, "head": d.source}


def summary(result: BenchResult) -> dict:
    """The JSON form (`--json FILE`): `methods` keyed by method name."""
    methods = {}
    for name, s in result.methods.items():
        methods[name] = {
            "tokens_per_s": round(s.tokens_per_s, 3),
            "speedup": None if result.speedup(name) is None else round(result.speedup(name), 4),
            "mean_accepted": round(s.mean_accepted, 4),
            "acceptance_by_depth": [round(h / s.spec_steps, 4) for h in s.depth_hits] if s.spec_steps else [],
            "p50_step_ms": round(s.latency_ms(0.50), 3),
            "p95_step_ms": round(s.latency_ms(0.95), 3),
            "identical_fraction": None if result.identical_fraction(name) is None else round(result.identical_fraction(name), 4),
            "tokens": s.tokens,
            "target_passes": s.passes,
            "fallback_steps": s.fallback_steps,
            "spec_tau": None if s.spec_tau is None else round(s.spec_tau, 4),
            "by_position": s.by_position(),
            "per_prompt": s.per_prompt,
            "memory": s.memory,
            "guard": s.guard,
            "draft": s.draft,
            "drafters": {d: {"steps": v[0], "drafted": v[1], "accepted": v[2]} for d, v in sorted(s.drafters.items())},
        }
    return {
        "methods": methods,
        "backend": result.backend,
        "model": result.model,
        "n_prompts": result.n_prompts,
        "max_tokens": result.max_tokens,
        "temperature": result.temperature,
        "repeat": result.repeat,
        "lockstep": result.lockstep,
        "targets_loaded": result.targets_loaded,
        "wall_s": round(result.wall_s, 2),
        "machine": result.machine,
        "plan_estimate": result.plan_estimate,
        "median_speedup": _median_speedup(result),
        "by_prompt_length": by_prompt_length(result),
        "by_category": by_category(result.methods),
    }


def length_class(n: int) -> int:
    """The power of two nearest a prompt length (in log scale): long prompts are built to land
    at about 512, 1K, 2K, ... tokens, so this names their size class."""
    return 1 << max(0, round(math.log2(max(1, n))))


def by_prompt_length(result: BenchResult) -> list[dict]:
    """Per size class of prompt: for each method its acceptance length over speculative steps,
    tokens/s, and the worst per-prompt ratio of its tokens/s to `none` on the same prompt."""
    base = result.methods.get("none")
    classes: dict[int, dict[str, dict]] = {}
    for name, s in result.methods.items():
        for i, r in enumerate(s.per_prompt):
            c = classes.setdefault(length_class(r["prompt_tokens"]), {}).setdefault(
                name, {"prompts": 0, "tokens": 0, "decode_s": 0.0, "spec_tokens": 0, "spec_steps": 0, "ratios": []})
            c["prompts"] += 1
            c["tokens"] += r["tokens"]
            c["decode_s"] += r["decode_s"]
            c["spec_tokens"] += r["spec_tokens"]
            c["spec_steps"] += r["spec_steps"]
            if base is not None and name != "none" and i < len(base.per_prompt) and base.per_prompt[i]["tokens_per_s"]:
                c["ratios"].append(r["tokens_per_s"] / base.per_prompt[i]["tokens_per_s"])
    out = []
    for size in sorted(classes):
        row = {"class": size, "methods": {}}
        for name, c in classes[size].items():
            row["methods"][name] = {
                "prompts": c["prompts"],
                "tokens_per_s": round(c["tokens"] / c["decode_s"], 3) if c["decode_s"] else 0.0,
                "spec_tau": round(c["spec_tokens"] / c["spec_steps"], 4) if c["spec_steps"] else None,
                "min_ratio_vs_none": round(min(c["ratios"]), 4) if c["ratios"] else None,
            }
        out.append(row)
    return out


def _median_speedup(result: BenchResult) -> float | None:
    vals = [result.speedup(m) for m in result.methods if m != "none" and result.speedup(m) is not None]
    return round(statistics.median(vals), 4) if vals else None
