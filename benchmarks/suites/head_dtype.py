"""Acceptance of an EAGLE head in llama.cpp by draft dtype (f16 against q8_0), on homespec's own prompts.

For each prompt the target's greedy reply is decoded first; then greedy chain speculation is replayed
over it: at each verified position the head (an eagle3 GGUF made by head_gguf, drafted by llama.cpp's
own eagle3 graph, homespec.heads.llamacpp_draft) drafts a chain of --k tokens after the target's next
token, the chain's leading tokens that equal the reply are accepted, and the next pass starts after
them. Tokens per target pass (tau) = reply tokens / passes. "agree" is the share of draft tokens a
variant drafts alike with the first one from the same contexts (a chain of --k at every second position
of every reply; "agree_first": the first draft token alone). No torch: this is the GGUF run path.

The target's features come from one llama.cpp pass over prompt + reply, the same for every dtype (a
causal target's features of a prefix are those of the prefix's rows; llama.cpp's CPU kernels are not
batch-invariant, so they differ from a pass over the prefix alone by the batch-vs-single noise,
docs/backends.md): the comparison between dtypes is exact, the absolute tau an estimate of a live run's.

    python -m benchmarks head_dtype --split test --prompts 16 --tokens 64 --k 4 --json FILE
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from benchmarks.harness import add_threads, smollm2
from benchmarks.results import Result
from homespec.embedded import DEFAULT_HEAD


def prompt_ids(split: str, n: int, target: Path) -> list[list[int]]:
    from homespec.backends.llamacpp.tokenizer import LlamaCppTokenizer
    from homespec.promptsets import load_prompts

    tok = LlamaCppTokenizer(str(target))
    try:
        return [tok.encode(tok.chat_prompt([{"role": "user", "content": it.turns[0]}], add_generation_prompt=True),
                           add_bos=False, special=True) for it in load_prompts(split)[:n]]
    finally:
        tok.close()


def replay(d, ctx: list[int], reply: list[int], k: int) -> tuple[int, list[list[int]]]:
    """Passes the reply takes with chains of k, and the chains drafted at every second position (for
    agreement). The target's features come from one pass over prompt + reply."""
    feats, _ = d.target_pass(ctx + reply)
    chains = [d.draft_from(ctx + reply[:pos], feats, reply[pos], k).tokens for pos in range(0, len(reply), 2)]
    pos, passes = 0, 0
    while pos < len(reply):
        chain = d.draft_from(ctx + reply[:pos], feats, reply[pos], k).tokens
        accepted = 0
        while accepted < k and pos + 1 + accepted < len(reply) and chain[accepted] == reply[pos + 1 + accepted]:
            accepted += 1
        pos += 1 + accepted
        passes += 1
    return passes, chains


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--head", default=str(DEFAULT_HEAD))
    ap.add_argument("--target", default=None)
    ap.add_argument("--split", default="test")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--dtypes", default="f16,q8_0")
    ap.add_argument("--twin", action="store_true", help="also the head's EAGLE-3 twin (f16), as a build without the patch runs it")
    add_threads(ap, 1)  # 1: no spinning thread barriers on a busy machine


def run(a: argparse.Namespace) -> Result:
    from homespec.backends.llamacpp.exports import eagle3_features
    from homespec.backends.llamacpp.head_convert import head_gguf
    from homespec.backends.llamacpp.lib import import_llama_cpp
    from homespec.backends.llamacpp.tokenizer import LlamaCppTokenizer
    from homespec.heads.llamacpp_draft import LlamaCppEagle3

    import_llama_cpp()
    target = Path(a.target) if a.target else smollm2()
    ids = prompt_ids(a.split, a.prompts, target)
    tok = LlamaCppTokenizer(str(target))
    eos = set(tok.eos_ids)
    tok.close()
    variants = [(dt, True) for dt in a.dtypes.split(",")] + ([("f16", False)] if a.twin else [])
    n_ctx = max(len(i) for i in ids) + a.tokens + a.k + 16
    rows, replies, base_chains = [], None, None
    for dtype, patched in variants:
        conv = head_gguf(a.head, target, dtype=dtype, patched=patched)
        t0 = time.perf_counter()
        with LlamaCppEagle3(target, conv.path, n_ctx=n_ctx, n_threads=a.threads) as d:
            if replies is None:
                replies = [d.greedy(ctx, a.tokens, eos) for ctx in ids]
            results = [replay(d, ctx, reply, a.k) for ctx, reply in zip(ids, replies)]
        passes = sum(p for p, _ in results)
        tokens = sum(len(r) for r in replies)
        chains = [c for _, cs in results for c in cs]
        row = {"kind": conv.kind, "dtype": dtype, "bytes": conv.path.stat().st_size, "tokens": tokens,
               "passes": passes, "tau": tokens / passes, "seconds": time.perf_counter() - t0}
        if base_chains is not None:
            row["agree"] = sum(x == y for c0, c1 in zip(base_chains, chains) for x, y in zip(c0, c1)) / (a.k * len(chains))
            row["agree_first"] = sum(c0[0] == c1[0] for c0, c1 in zip(base_chains, chains)) / len(chains)
        base_chains = base_chains if base_chains is not None else chains
        rows.append(row)
        print(f"{conv.kind:12s} {dtype:5s} {row['bytes'] / 2**20:7.2f} MiB  tau {row['tau']:.3f} "
              f"({tokens} tokens / {passes} passes)" + (f"  agree {row['agree']:.3f} (first {row['agree_first']:.3f})"
                                                        if "agree" in row else ""), flush=True)
    if len(rows) > 1:
        base = rows[0]["tau"]
        for r in rows[1:]:
            print(f"{r['kind']} {r['dtype']}: tau {100 * (r['tau'] / base - 1):+.2f} % against {rows[0]['dtype']}")
    return Result(rows=rows, ratios={f"tau_{r['kind']}_{r['dtype']}_over_first": round(r["tau"] / rows[0]["tau"], 4)
                                     for r in rows[1:]},
                  detail={"head": a.head, "target": str(target), "split": a.split, "prompts": a.prompts,
                          "tokens": a.tokens, "k": a.k, "llama_eagle3_features": eagle3_features()})
