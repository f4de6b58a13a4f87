"""Measure the llama.cpp backend on this machine: decode and verification cost, feature-capture
overhead, and the batch-vs-single noise floor. The numbers in docs/backends.md come from here.

    .venv/bin/python -m benchmarks llamacpp_batch [--model FILE] [--threads N] [--prompts 20] [--json out.json]

Timings are the minimum over repeats (the least-disturbed run; a busy machine only adds time),
with the median alongside. With --threads 1 llama.cpp computes on the calling thread, so the
script also reports that thread's CPU time, which other processes on a shared machine do not
inflate the way they inflate wall time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from benchmarks.harness import add_model, add_threads, smollm2
from benchmarks.results import Result
from homespec.backends.settings import BackendSettings

PROMPTS = [
    "Name three primary colours.",
    "What is the capital of France?",
    "Explain what a binary search does.",
    "Write a haiku about autumn leaves.",
    "How many legs does a spider have?",
    "Give me a tip for sleeping better.",
    "What is photosynthesis?",
    "Translate 'good morning' into Spanish.",
    "Why is the sky blue?",
    "List three uses of a paperclip.",
    "What does a CPU do?",
    "Describe a cat in one sentence.",
    "How do I boil an egg?",
    "What is 12 times 11?",
    "Suggest a name for a pet goldfish.",
    "What is the difference between weather and climate?",
    "Write a short thank-you note to a friend.",
    "What are the planets of the solar system?",
    "How does a bicycle stay upright?",
    "Give me a fun fact about octopuses.",
    "What is a prime number?",
    "Summarise the story of Cinderella in two sentences.",
]


def timed(fn, repeats: int) -> dict[str, float]:
    """Milliseconds of fn(): wall min / median and calling-thread CPU min over `repeats` runs."""
    wall, cpu = [], []
    for _ in range(repeats):
        t, c = time.perf_counter(), time.thread_time()
        fn()
        cpu.append((time.thread_time() - c) * 1000)
        wall.append((time.perf_counter() - t) * 1000)
    return {"wall_min": round(min(wall), 2), "wall_median": round(statistics.median(wall), 2), "cpu_min": round(min(cpu), 2)}


def chain(n: int) -> list[int]:
    return list(range(-1, n - 1))


def tree24() -> list[int]:
    """24 nodes, depth 4: root, 3 children, 2 below each (6), 2 below each of those (12), and one
    more level under the first two of them (2)."""
    parents = [-1]
    level = [0]
    for width in (3, 2, 2):
        nxt = []
        for p in level:
            for _ in range(width):
                parents.append(p)
                nxt.append(len(parents) - 1)
        level = nxt
    parents += level[:2]
    return parents


def measure_costs(backend, repeats: int) -> dict[str, dict[str, float]]:
    prompt = backend.tokenizer.encode(backend.tokenizer.chat_prompt([{"role": "user", "content": PROMPTS[0]}]), special=True)
    res: dict[str, dict[str, float]] = {}

    def run(parents):
        def go():
            backend.verify([1000 + i for i in range(len(parents))], parents)

        return go

    backend.reset()
    backend.prefill(prompt)
    shapes = {"decode 1": chain(1), "chain 2": chain(2), "chain 4": chain(4), "chain 8": chain(8), "tree 24": tree24()}
    for mode in ("batch", "exact"):
        backend.verify_mode = mode
        for name, parents in shapes.items():
            if mode == "exact" and name == "decode 1":
                continue
            res[f"{name} [{mode}]"] = timed(run(parents), repeats)
    backend.verify_mode = "batch"
    return res


def greedy_plain(backend, prompt: list[int], n: int) -> list[int]:
    """n greedy tokens through the one-token path (each token its own llama_decode)."""
    backend.reset()
    tok = int(backend.prefill(prompt).logits[-1].argmax())
    out = [tok]
    while len(out) < n:
        logits = backend.verify([tok], [-1]).logits[0]
        backend.commit([0])
        tok = int(logits.argmax())
        out.append(tok)
    return out


def noise_floor(backend, n_prompts: int, n_tokens: int) -> dict[str, float]:
    """Re-score each greedy answer in one batch (and in exact mode); count argmax flips."""
    tk = backend.tokenizer
    flips = {"batch": 0, "exact": 0}
    gaps = []
    total = 0
    for text in PROMPTS[:n_prompts]:
        prompt = tk.encode(tk.chat_prompt([{"role": "user", "content": text}]), special=True)
        answer = greedy_plain(backend, prompt, n_tokens)
        for mode in ("batch", "exact"):
            backend.reset()
            backend.prefill(prompt)
            backend.verify_mode = mode
            logits = backend.verify(answer[:-1], chain(len(answer) - 1)).logits  # [n-1, V]
            backend.verify_mode = "batch"
            picks = logits.argmax(dim=-1).tolist()
            for i, p in enumerate(picks):
                if p != answer[i + 1]:
                    flips[mode] += 1
                    if mode == "batch":
                        top2 = logits[i].topk(2).values
                        gaps.append(float(top2[0] - top2[1]))
        total += len(answer) - 1
    return {
        "tokens": total,
        "flips_batch": flips["batch"],
        "flips_exact": flips["exact"],
        "flip_rate_batch": flips["batch"] / total,
        "max_top2_gap_at_flip": max(gaps) if gaps else 0.0,
    }


def capture_overhead(model: str, threads: int | None, repeats: int) -> dict[str, dict[str, float]]:
    """Decode cost without features and with each capture, calls interleaved so that machine
    load hits every variant alike."""
    from homespec.backends.llamacpp.backend import LlamaCppBackend

    variants = {"none": {}, "layer_inp": {"feature_capture": "layer_inp"}, "eval_callback": {"feature_capture": "eval_callback"}}
    backends = {}
    for name, kw in variants.items():
        b = LlamaCppBackend(model, BackendSettings(n_ctx=2048, n_threads=threads), **kw)
        if name != "none":
            b.set_feature_layers((2, 15, 27))
        b.prefill(list(range(1000, 1100)))
        backends[name] = b
    out: dict[str, dict[str, float]] = {}
    for shape, parents in (("decode 1", chain(1)), ("tree 24", tree24())):
        samples: dict[str, list[dict[str, float]]] = {n: [] for n in backends}
        for _ in range(repeats):
            for name, b in backends.items():
                samples[name].append(timed(lambda: b.verify([7] * len(parents), parents), 1))
        for name, runs in samples.items():
            out[f"{shape} features={name}"] = {
                "wall_min": min(r["wall_min"] for r in runs),
                "wall_median": round(statistics.median(r["wall_min"] for r in runs), 2),
                "cpu_min": min(r["cpu_min"] for r in runs),
            }
    for b in backends.values():
        b.close()
    return out


def add_arguments(ap: argparse.ArgumentParser) -> None:
    add_model(ap, "GGUF file (default: the embedded SmolLM2-135M Q4_1)")
    add_threads(ap)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--prompts", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=48)


def run(args: argparse.Namespace) -> Result:
    from homespec.backends.llamacpp.backend import LlamaCppBackend

    model = args.model or str(smollm2())
    results: dict[str, object] = {"model": model, "threads": args.threads}

    def report(key: str, value: object) -> None:
        results[key] = value
        print(key, json.dumps(value), file=sys.stderr, flush=True)

    report("capture overhead", capture_overhead(model, args.threads, args.repeats))
    for fa in (True, False):
        with LlamaCppBackend(model, BackendSettings(n_ctx=2048, n_threads=args.threads, flash_attn=fa)) as b:
            b.set_feature_layers((2, 15, 27))
            report(f"verify cost flash_attn={fa}", measure_costs(b, args.repeats))
            report(f"noise flash_attn={fa}", noise_floor(b, args.prompts, args.tokens))
    print(json.dumps(results, indent=1))
    rows = [{"measurement": k, "figures": v} for k, v in results.items() if k not in ("model", "threads")]
    return Result(rows=rows, detail={"model": model, "threads": args.threads, "repeats": args.repeats,
                                     "prompts": args.prompts, "tokens": args.tokens})

