"""Record how often prompt lookup and suffix drafting offer a chain, and how much of it the target
accepts, by match length, on homespec's dev sets: the guard's prior for each lookup and the plan's
figures for each workload (homespec/data/profiles/lookup_acceptance.json).

    python -m benchmarks record_lookups [--limit 20] [--tokens 128] [--threads 2] [--out FILE]

Workloads: `chat` (dev.jsonl's chat prompts) and `code-edit` (edit-dev.jsonl). Each lookup drafts
alone with no guard (its whole chain of 8 every step it finds one), greedy, on the embedded SmolLM2;
what a step accepts does not depend on the machine's speed, so the figures are the same on a busy
machine. Dev sets only: the test sets stay for measuring.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks.harness import ROOT, add_threads
from benchmarks.results import Result
from homespec.engine.options import RunOptions
from homespec.promptsets import load_prompts

OUT = ROOT / "homespec" / "data" / "profiles" / "lookup_acceptance.json"
WORKLOADS = {"chat": ("dev", "chat"), "code-edit": ("edit-dev", None)}
SOURCES = ("ngram", "suffix")
DEPTH = 8


def record(source: str, items, tokens: int, threads: int | None) -> dict:
    """One lookup, forced, over the prompts -> {"steps", "buckets": {b: {"tried", "hits"}}}."""
    from homespec.session import Session, final
    from homespec.session.encode import prompt_tokens
    from homespec.speculative.steps import Limits

    opt = RunOptions(method=source, guard=False, ctx=2048, threads=threads, draft_depth=DEPTH, draft_topk=1,
                     draft_tokens=DEPTH + 1)
    session = Session.open(opt, with_plan=False)
    try:
        for item in items:
            ids = prompt_tokens(session, list(item.turns[:1]), True)
            final(session.stream(ids, limits=Limits(max_tokens=tokens), cache_prompt=False))
            print(f"  {source}: {item.id}", file=sys.stderr)
        g = session.guard
        buckets = {str(b): {"tried": [int(x) for x in g.copies.tried[(s, b)]], "hits": [int(x) for x in g.copies.hits[(s, b)]]}
                   for (s, b) in sorted(g.copies.tried)}
        return {"steps": g.spec_steps + g.plain_steps, "buckets": buckets}
    finally:
        session.close()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--limit", type=int, default=20, help="prompts per workload")
    parser.add_argument("--tokens", type=int, default=128)
    add_threads(parser)
    parser.add_argument("--out", type=Path, default=OUT, help="the profile to write (default: the packaged one)")


def run(args: argparse.Namespace) -> Result:
    out = {"model": "embedded SmolLM2-135M-Instruct Q4_1", "backend": "llamacpp", "max_tokens": args.tokens,
           "chain": DEPTH, "made_by": "python -m benchmarks record_lookups", "workloads": {}}
    for workload, (split, category) in WORKLOADS.items():
        items = [i for i in load_prompts(split) if category is None or i.category == category][:args.limit]
        out["workloads"][workload] = {"prompts": f"{split}.jsonl" + (f" ({category})" if category else ""),
                                      "n_prompts": len(items),
                                      "sources": {s: record(s, items, args.tokens, args.threads) for s in SOURCES}}
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    rows = [{"workload": w, "source": s, "steps": r["steps"]} for w, d in out["workloads"].items() for s, r in d["sources"].items()]
    return Result(rows=rows, detail=out)

