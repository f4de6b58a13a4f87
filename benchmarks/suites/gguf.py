"""GGUF backend, measured in one run: speed, exactness, and llama-cpp-python's own speculation.

    .venv/bin/python -m benchmarks gguf [--prompts 20] [--max-tokens 64] [--draft HEAD_DIR] [--json out.json]

Side by side on homespec's held-out test prompts (greedy, interleaved per prompt):
  plain       llama-cpp-python's Llama.generate, one token per decode (the reference)
  lcpp-pld    llama-cpp-python's LlamaPromptLookupDecoding
  none        homespec's loop without a drafter
  ngram       homespec prompt lookup
  eagle3      homespec EAGLE-3.1 head (batched tree verification)
  eagle3-exact  the same head, tree nodes verified with the one-token kernels
Reported: decode tokens/s and speedup against `plain`; the fraction of prompts identical to `plain`;
(1) teacher-forcing agreement: every eagle3 token against the argmax of a one-batch re-score of
prompt + output; (2) eagle3's first-divergence rate per generated token next to the noise floor:
argmax flips per token when plain's own output is re-scored in one batch.
Two re-scorers, each with its own noise floor: homespec's `LlamaCppBackend.score` (one llama_decode
call in micro-batches of 32 rows, under the 64 query rows at which llama.cpp's CPU flash attention
switches to its tiled kernel, so its rows equal the one-token path) and llama-cpp-python's
`Llama.eval` (micro-batches of 512: tiled kernels, a noise floor of its own).
"""

from __future__ import annotations

import argparse
import sys
import time

from benchmarks.harness import add_threads
from benchmarks.results import Result


def lcpp_generate(llm, prompt: list[int], max_tokens: int, eos: frozenset[int]) -> tuple[list[int], float]:
    out: list[int] = []
    t_first = None
    llm.reset()
    for tok in llm.generate(prompt, top_k=1, top_p=1.0, temp=0.0, repeat_penalty=1.0, reset=True):
        if t_first is None:
            t_first = time.perf_counter()
        out.append(int(tok))
        if tok in eos or len(out) >= max_tokens:
            break
    return out, (time.perf_counter() - t_first) if t_first else 0.0


def rescore_argmax(llm, prompt: list[int], output: list[int]) -> list[int]:
    """Argmax at each output position from ONE batched evaluation of prompt + output (llama-cpp-python)."""
    import numpy as np

    llm.reset()
    llm.eval(prompt + output[:-1])
    scores = np.asarray(llm.scores[len(prompt) - 1: len(prompt) - 1 + len(output)])
    return [int(i) for i in scores.argmax(axis=-1)]


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--prompts", type=int, default=20)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--draft", default=None, help="EAGLE head dir (default: the shipped head)")
    add_threads(ap)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--topk", type=int, default=1)
    ap.add_argument("--nodes", type=int, default=5)


def open_sessions(args: argparse.Namespace) -> dict:
    """homespec's runs, one session per method, all from the same plan."""
    from homespec.session import RunOptions, Session

    base = dict(draft=args.draft, ctx=args.ctx, threads=args.threads, draft_depth=args.depth,
                draft_topk=args.topk, draft_tokens=args.nodes)
    return {
        "none": Session.open(RunOptions(method="none", **base)),
        "ngram": Session.open(RunOptions(method="ngram", **base)),
        "eagle3": Session.open(RunOptions(method="eagle3", **base)),
        "eagle3-exact": Session.open(RunOptions(method="eagle3", exact=True, **base)),
    }


def open_references(args: argparse.Namespace, ref_session) -> dict:
    """llama-cpp-python's plain and prompt-lookup engines, its re-scorer, and homespec's own
    re-scorer (LlamaCppBackend.score in micro-batches of 32 rows)."""
    import dataclasses

    import llama_cpp

    from homespec.backends.llamacpp.backend import LlamaCppBackend

    path = ref_session.model_path
    threads = args.threads or ref_session.backend.n_threads if hasattr(ref_session.backend, "n_threads") else None
    # The references run with the same flash-attention setting as homespec's plan: with it on, llama.cpp's CPU
    # kernels give the same logits in a micro-batch of under 64 rows as one token at a time; with it off they
    # do not (docs/backends.md).
    fa = bool(ref_session.plan.settings.flash_attn) if ref_session.plan is not None else True
    kw = dict(model_path=path, n_ctx=args.ctx, verbose=False, logits_all=False, flash_attn=fa,
              **({"n_threads": threads} if threads else {}))
    st = ref_session.backend.settings
    return {
        "plain": llama_cpp.Llama(**kw),
        "lcpp-pld": llama_cpp.Llama(draft_model=llama_cpp.llama_speculative.LlamaPromptLookupDecoding(num_pred_tokens=10), **kw),
        "scorer": llama_cpp.Llama(**{**kw, "logits_all": True}),
        "own": LlamaCppBackend(path, dataclasses.replace(st, n_batch=max(st.n_batch, args.ctx), n_ubatch=32)),
    }


def run_prompts(args, sessions: dict, refs: dict, items: list) -> tuple[list, dict, dict, dict, dict]:
    """Every method on every prompt, interleaved per prompt: (prompt ids, outputs, seconds, tokens, passes)."""
    from homespec.session import final
    from homespec.session.encode import prompt_tokens
    from homespec.speculative.steps import Limits

    eos = sessions["none"].backend.tokenizer.eos_ids
    names = ["plain", "lcpp-pld", *sessions]
    outs: dict[str, list[list[int]]] = {n: [] for n in names}
    secs = {n: 0.0 for n in names}
    toks = {n: 0 for n in names}
    passes = {n: 0 for n in names}
    limits = Limits(max_tokens=args.max_tokens)
    prompts = []
    for i, item in enumerate(items):
        ids = prompt_tokens(sessions["none"], list(item.turns[:1]), True)
        prompts.append(ids)
        for name in ("plain", "lcpp-pld"):
            out, dt = lcpp_generate(refs[name], ids, args.max_tokens, eos)
            outs[name].append(out)
            secs[name] += dt
            toks[name] += max(0, len(out) - 1)
        for name, s in sessions.items():
            res = final(s.stream(ids, limits=limits, cache_prompt=False))
            outs[name].append(res.token_ids)
            secs[name] += res.decode_s
            toks[name] += max(0, len(res.token_ids) - 1)
            passes[name] += len(res.steps) - 1
        print(f"prompt {i + 1}/{len(items)}", file=sys.stderr)
    return prompts, outs, secs, toks, passes


def teacher_forcing(refs: dict, prompts: list, outs: dict) -> dict:
    """(1) each re-scorer's agreement with eagle3's tokens, and its noise floor on plain's own output."""
    own = refs["own"]

    def own_argmax(prompt: list[int], output: list[int]) -> list[int]:
        logits = own.score(prompt + output[:-1])
        return [int(i) for i in logits[len(prompt) - 1 :].argmax(-1)]

    scorers = {"homespec": own_argmax, "llama-cpp-python": lambda ids, out: rescore_argmax(refs["scorer"], ids, out)}
    forcing = {}
    for name, score in scorers.items():
        agree = total = flips = flip_total = 0
        for ids, e, p in zip(prompts, outs["eagle3"], outs["plain"]):
            ref = score(ids, e)
            agree += sum(1 for a, b in zip(ref, e) if a == b)
            total += len(e)
            floor = score(ids, p)
            flips += sum(1 for a, b in zip(floor, p) if a != b)
            flip_total += len(p)
        forcing[name] = {"agreement": round(agree / total, 4) if total else None,
                         "noise_floor_flips_per_token": round(flips / flip_total, 5) if flip_total else None}
    return forcing


def divergence(outs: dict) -> float | None:
    """(2) eagle3's first divergences from plain per generated token."""
    div_events = div_tokens = 0
    for e, p in zip(outs["eagle3"], outs["plain"]):
        k = next((j for j, (a, b) in enumerate(zip(e, p)) if a != b), None)
        div_tokens += (k + 1) if k is not None else min(len(e), len(p))
        div_events += 1 if k is not None or len(e) != len(p) else 0
    return round(div_events / div_tokens, 5) if div_tokens else None


def method_rows(outs: dict, secs: dict, toks: dict, passes: dict, n_items: int) -> dict:
    rows = {}
    for n in outs:
        tps = toks[n] / secs[n] if secs[n] else 0.0
        same = sum(1 for a, b in zip(outs[n], outs["plain"]) if a == b) / n_items
        rows[n] = {"tokens_per_s": round(tps, 2), "identical_fraction": round(same, 3),
                   "tokens_per_pass": round(sum(len(o) - 1 for o in outs[n]) / passes[n], 3) if passes[n] else None}
    base_tps = rows["plain"]["tokens_per_s"]
    for n in outs:
        rows[n]["speedup_vs_plain"] = round(rows[n]["tokens_per_s"] / base_tps, 3) if base_tps else None
    return rows


def print_report(report: dict) -> None:
    print(f"{'method':14} {'tok/s':>8} {'vs plain':>9} {'identical':>10} {'tok/pass':>9}")
    for n, r in report["methods"].items():
        print(f"{n:14} {r['tokens_per_s']:8.1f} {r['speedup_vs_plain']:8.2f}x {r['identical_fraction']:10.0%} "
              f"{'' if r['tokens_per_pass'] is None else format(r['tokens_per_pass'], '9.2f')}")
    for name, f in report["scorers"].items():
        print(f"re-scored by {name}: teacher-forcing agreement of eagle3 tokens {f['agreement']:.2%}, "
              f"noise floor {f['noise_floor_flips_per_token']} flips per token (plain's own output)")
    print(f"eagle3 first-divergence rate per token: {report['eagle3_divergence_per_token']}")


def run(args: argparse.Namespace) -> Result:
    from homespec.promptsets import load_prompts

    sessions = open_sessions(args)
    refs = open_references(args, sessions["none"])
    items = load_prompts("test")[: args.prompts]
    prompts, outs, secs, toks, passes = run_prompts(args, sessions, refs, items)
    forcing = teacher_forcing(refs, prompts, outs)
    report = {
        "model": sessions["none"].model_path, "prompts": len(items), "max_tokens": args.max_tokens,
        "methods": method_rows(outs, secs, toks, passes, len(items)),
        "teacher_forcing_agreement": forcing["homespec"]["agreement"],
        "eagle3_divergence_per_token": divergence(outs),
        "noise_floor_flips_per_token": forcing["homespec"]["noise_floor_flips_per_token"],
        "scorers": forcing,
    }
    print_report(report)
    for s in sessions.values():
        s.close()
    refs["own"].close()
    methods = report.pop("methods")
    return Result(rows=[{"method": n, **r} for n, r in methods.items()],
                  ratios={f"{n}_over_plain": r["speedup_vs_plain"] for n, r in methods.items() if n != "plain"},
                  detail=report)
