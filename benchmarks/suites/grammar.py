"""Structured output under speculation, measured: validity, the mask's cost, tokens per target pass.

    .venv/bin/python -m benchmarks grammar [--methods none,eagle3,ngram] [--samples 2] [--tokens 160]
        [--threads 2] [--json FILE]
    .venv/bin/python -m benchmarks grammar --replay FILE    # the mask figures again, from a run's JSON

On the embedded SmolLM2 (the engine, one lane, --ctx 2048, no guard: every step drafts), for each
schema of SCHEMAS and each method: one greedy answer and `--samples` sampled ones (temperature 0.8,
seeds 1..n) decoded under the schema's grammar, plus the same prompt's greedy answer without it.
Reported per method: answers that parse and validate against their schema (jsonschema-rs), answers
that ended on their own (not at --tokens), tokens per target pass with the grammar on and off, and
decode speed on and off; and the mask's cost, replayed on the greedy answers' tokens: one
mask per emitted token, and one per drafted node for a pruned tree (Guide.mask, Guide.prune).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from benchmarks.harness import add_threads
from benchmarks.results import Result


SCHEMAS = {
    "person": ({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                                 "city": {"type": "string"}},
                "required": ["name", "age", "city"], "additionalProperties": False},
               "Alice is 30 and lives in Paris. Describe her as JSON."),
    "address": ({"type": "object", "properties": {"street": {"type": "string"}, "number": {"type": "integer"},
                                                  "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
                                                  "country": {"type": "string"}},
                 "required": ["street", "number", "zip", "country"], "additionalProperties": False},
                "Write the address 10 Downing Street, 75001, France as JSON."),
    "shopping": ({"type": "object", "properties": {"items": {"type": "array", "minItems": 2, "maxItems": 5,
                                                             "items": {"type": "string"}}},
                  "required": ["items"], "additionalProperties": False},
                 "List what I need to bake a cake, as JSON."),
    "sentiment": ({"type": "object", "properties": {"label": {"enum": ["positive", "negative", "neutral"]},
                                                    "score": {"type": "number", "minimum": 0, "maximum": 1}},
                   "required": ["label", "score"], "additionalProperties": False},
                  "Classify the sentiment of: 'I loved this film, it was wonderful.' Answer in JSON."),
    "event": ({"type": "object", "properties": {
        "title": {"type": "string"}, "date": {"type": "string", "format": "date"},
        "attendees": {"type": "array", "items": {"type": "object", "properties": {
            "name": {"type": "string"}, "role": {"enum": ["host", "guest"]}},
            "required": ["name", "role"], "additionalProperties": False}, "maxItems": 3}},
        "required": ["title", "date", "attendees"], "additionalProperties": False},
        "Describe a birthday party on 2026-05-01 hosted by Tom with guests Ann and Bo, as JSON."),
    "flags": ({"type": "object", "properties": {"vegetarian": {"type": "boolean"}, "spicy": {"type": "boolean"},
                                                "calories": {"type": "integer", "minimum": 0}},
               "required": ["vegetarian", "spicy", "calories"], "additionalProperties": False},
              "Describe a mild vegetable curry of 450 calories as JSON."),
    "book": ({"type": "object", "properties": {"title": {"type": "string"}, "author": {"type": "string"},
                                               "year": {"type": "integer"}, "tags": {"type": "array",
                                                                                      "items": {"type": "string"},
                                                                                      "maxItems": 4}},
              "required": ["title", "author", "year"], "additionalProperties": False},
             "Describe the book Pride and Prejudice as JSON."),
    "answer": ({"type": "object", "properties": {"answer": {"type": "integer"}, "reasoning": {"type": "string",
                                                                                              "maxLength": 200}},
                "required": ["reasoning", "answer"], "additionalProperties": False},
               "What is 12 times 7? Answer as JSON with your reasoning first."),
}


def run_method(method: str, args) -> dict:
    from homespec.cli.options import RunArgs
    from homespec.engine.api import EngineRequest
    from homespec.engine.core import Engine, follow
    from homespec.engine.responses import final
    from homespec.grammar import json_schema, vocabulary
    from homespec.session.encode import encode_prompt
    from homespec.speculative.sampling import Sampler

    engine = Engine.open(RunArgs(method=method, ctx=2048, threads=args.threads).options())
    rows = []
    try:
        vocab = vocabulary(engine.tokenizer)
        for name, (schema, question) in SCHEMAS.items():
            grammar = json_schema(schema, vocab)
            ids = tuple(encode_prompt(engine.tokenizer, [question], chat=True))
            free = final(follow(engine, engine.submit(EngineRequest(ids, args.tokens))))
            for seed in range(args.samples + 1):  # seed 0: greedy
                sampler = Sampler(temperature=0.8, seed=seed) if seed else None
                t0 = time.perf_counter()
                fin = final(follow(engine, engine.submit(EngineRequest(ids, args.tokens, sampler=sampler, seed=seed,
                                                                       grammar=grammar))))
                rows.append({"schema": name, "seed": seed, "valid": _valid(schema, fin.text), "finish": fin.finish,
                             "tokens": len(fin.token_ids), "tau": fin.mean_accepted, "tok_s": fin.tokens_per_s,
                             "wall_s": time.perf_counter() - t0, "free_tau": free.mean_accepted,
                             "free_tok_s": free.tokens_per_s, "token_ids": list(fin.token_ids), "text": fin.text})
                print(f"{method:7s} {name:10s} seed {seed}: valid {rows[-1]['valid']} {fin.finish:6s} "
                      f"{len(fin.token_ids):3d} tokens, tau {fin.mean_accepted:.2f} (free {free.mean_accepted:.2f})",
                      file=sys.stderr)
    finally:
        engine.close()
    return {"method": method, "rows": rows}


def _valid(schema: dict, text: str) -> bool:
    import jsonschema_rs

    try:
        return jsonschema_rs.validator_for(schema).is_valid(json.loads(text))
    except ValueError:
        return False


def mask_cost(rows: list[dict]) -> dict:
    """Replay greedy answers' tokens through a fresh Guide: seconds per mask, per emitted token, and
    per drafted node of a 4-deep chain pruned at every position."""
    from homespec.backends.tokenizer import load_tokenizer
    from homespec.contracts.tree import chain
    from homespec.embedded import smollm2_path
    from homespec.grammar import json_schema, vocabulary

    vocab = vocabulary(load_tokenizer(str(smollm2_path())))
    per_token, per_node = [], []
    for row in (r for r in rows if r["seed"] == 0):
        guide = json_schema(SCHEMAS[row["schema"]][0], vocab).start()
        ids = [t for t in row["token_ids"] if t not in vocab.eos_tokens]
        for i, t in enumerate(ids):
            t0 = time.perf_counter()
            guide.mask()
            per_token.append(time.perf_counter() - t0)
            ahead = ids[i + 1:i + 5]
            if ahead:
                tree = chain([t, *ahead])
                t0 = time.perf_counter()
                guide.advance([t])
                guide.prune(tree)
                per_node.append((time.perf_counter() - t0) / max(1, tree.size))
            else:
                guide.advance([t])
    ms = sorted(1e3 * t for t in per_token)
    return {"mask_ms_per_token": statistics.median(ms), "mask_ms_mean": statistics.mean(ms),
            "mask_ms_p95": ms[int(0.95 * (len(ms) - 1))], "mask_ms_max": ms[-1],
            "share_over_1ms": sum(t > 1.0 for t in ms) / len(ms),
            "prune_ms_per_node": 1e3 * statistics.median(per_node), "tokens": len(ms)}


def summary(result: dict) -> dict:
    rows = result["rows"]
    spec = [r for r in rows if r["seed"] == 0]
    return {"method": result["method"], "answers": len(rows), "valid": sum(r["valid"] for r in rows),
            "ended": sum(r["finish"] == "eos" for r in rows),
            "tau_grammar": statistics.mean(r["tau"] for r in spec), "tau_free": statistics.mean(r["free_tau"] for r in spec),
            "tok_s_grammar": statistics.median(r["tok_s"] for r in spec),
            "tok_s_free": statistics.median(r["free_tok_s"] for r in spec)}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--methods", default="none,eagle3,ngram")
    p.add_argument("--samples", type=int, default=2)
    p.add_argument("--tokens", type=int, default=160)
    add_threads(p, 2)
    p.add_argument("--replay", type=Path, help="recompute the mask figures from this run's results file (and write them there)")


def run(args: argparse.Namespace) -> Result:
    if args.replay is not None:
        doc = json.loads(args.replay.read_text())
        out = doc.get("detail", doc)  # a results file keeps the runs in its detail
        out["mask"] = mask_cost(out["runs"][0]["rows"])
        args.replay.write_text(json.dumps(doc, indent=1))
        print(json.dumps(out["mask"]))
        return Result(detail={"replayed": str(args.replay), "mask": out["mask"]})
    results = [run_method(m, args) for m in args.methods.split(",")]
    out = {"summary": [summary(r) for r in results], "mask": mask_cost(results[0]["rows"]), "runs": results}
    for s in out["summary"]:
        print(f"{s['method']:7s} valid {s['valid']}/{s['answers']}, ended {s['ended']}/{s['answers']}; tokens per "
              f"target pass {s['tau_grammar']:.2f} with the grammar, {s['tau_free']:.2f} without; "
              f"{s['tok_s_grammar']:.1f} vs {s['tok_s_free']:.1f} tok/s")
    m = out["mask"]
    print(f"mask: {m['mask_ms_per_token']:.3f} ms per token (mean {m['mask_ms_mean']:.3f}, "
          f"{100 * m['share_over_1ms']:.1f} % over 1 ms, max {m['mask_ms_max']:.1f}), "
          f"{m['prune_ms_per_node']:.3f} ms per drafted node pruned, over {m['tokens']} tokens")
    return Result(rows=out["summary"], detail={"mask": m, "runs": results})

