"""Prompt reuse, measured: multi-turn conversations against `homespec serve` with and without it.

    .venv/bin/python -m benchmarks reuse [--turns 8] [--doc-tokens 1200] [--tokens 128] [--rounds 2]
        [--method eagle3] [--threads 2] [--json FILE]

One server on 127.0.0.1 (the embedded SmolLM2, 2 slots, --ctx 4096) answers, through the official `openai`
client, streamed and greedy:

  conversation  `--turns` turns; the first carries a document of about --doc-tokens tokens (homespec's
                own long-prompt material, test split), the others ask about it; every request sends the
                whole history, as a chat UI does. Run twice per round, with reuse (the default) and with
                `cache_prompt: false`, the order alternating by round, so both see the machine alike.
  agents        two clients sharing one long system prompt (the document) with different questions,
                one after the other on a server with reuse: the second's prompt tokens processed.
  cache-ram     (--cache-ram MIB) a second server, 2 slots and MIB of host RAM: conversation A, then
                two others with documents of their own that take both slots, then A's next turn: its
                history comes back from host RAM instead of being prefilled again.

Per turn: time to first token (client-side, first content chunk), timings.prompt_ms, cache_n and
prompt_n; per conversation: its wall time. Printed: medians over rounds per turn, the last turn's
TTFT over the first turn's with reuse, and the conversation's wall time without reuse over with.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from benchmarks.harness import Proc, add_rounds, add_threads, alternate, free_port
from benchmarks.results import Result


QUESTIONS = ["Summarise the document in three sentences.", "Who is the person most associated with it?",
             "What problems has it faced?", "What are the plans for next year?",
             "Write a short letter to the local newspaper about it.", "List five facts from the document.",
             "What would a sceptic say about it?", "Give the document a title and explain the choice.",
             "Which numbers appear in the document?", "Write a two-line poem about it."]


def document(tokens: int, seed: int = 11) -> str:
    """About `tokens` tokens of the embedded model's tokenizer: a long prompt of homespec's own
    material, cut on a word boundary."""
    from homespec.backends.tokenizer import load_tokenizer
    from homespec.embedded import smollm2_path
    from homespec.longprompts.compose import long_prompts

    text = long_prompts(tokens, 1, seed=seed)[0].turns[0]
    tok = load_tokenizer(str(smollm2_path()))
    try:
        words = text.split(" ")
        while len(words) > 1 and len(tok.encode(" ".join(words), add_bos=False)) > tokens:
            words = words[: int(len(words) * 0.9)]
        return " ".join(words)
    finally:
        tok.close()


def ask(client, messages: list[dict], tokens: int, cache_prompt: bool) -> dict:
    """One streamed, greedy answer -> its text, client-side TTFT and the server's timings."""
    t0 = time.perf_counter()
    ttft, text, timings = None, [], {}
    stream = client.chat.completions.create(model="m", messages=messages, max_tokens=tokens, temperature=0,
                                            stream=True, extra_body={"cache_prompt": cache_prompt})
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            ttft = ttft if ttft is not None else time.perf_counter() - t0
            text.append(chunk.choices[0].delta.content)
        extra = getattr(chunk, "model_extra", None) or {}
        timings = extra.get("timings", timings)
    return {"text": "".join(text), "ttft_s": ttft or time.perf_counter() - t0, "wall_s": time.perf_counter() - t0,
            "prompt_ms": timings.get("prompt_ms"), "cache_n": timings.get("cache_n"), "prompt_n": timings.get("prompt_n")}


def conversation(client, doc: str, turns: int, tokens: int, cache_prompt: bool) -> dict:
    msgs = [{"role": "user", "content": f"Read this document.\n\n{doc}\n\n{QUESTIONS[0]}"}]
    out, t0 = [], time.perf_counter()
    for i in range(turns):
        r = ask(client, msgs, tokens, cache_prompt)
        out.append({k: v for k, v in r.items() if k != "text"})
        msgs += [{"role": "assistant", "content": r["text"]},
                 {"role": "user", "content": QUESTIONS[(i + 1) % len(QUESTIONS)]}]
    return {"turns": out, "wall_s": time.perf_counter() - t0}


def agents(client, doc: str, tokens: int) -> list[dict]:
    system = {"role": "system", "content": f"You answer questions about this document.\n\n{doc}"}
    return [{k: v for k, v in ask(client, [system, {"role": "user", "content": q}], tokens, True).items() if k != "text"}
            for q in (QUESTIONS[1], QUESTIONS[3])]


def host_ram(cache_ram: int, threads: int, method: str, doc_tokens: int, tokens: int) -> dict:
    """A's second turn after two other conversations took both slots, on a server with --cache-ram."""
    import openai

    port = free_port()
    cmd = [sys.executable, "-m", "homespec", "serve", "--port", str(port), "--parallel", "2", "--ctx", "4096",
           "--threads", str(threads), "--method", method, "--cache-ram", str(cache_ram)]
    server = Proc("homespec serve --cache-ram", cmd, port, Path("/tmp/bench_reuse_ram.log")).wait_ready()
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0, timeout=600)
    try:
        docs = [document(doc_tokens), *(document(doc_tokens, seed=s) for s in (21, 31))]
        a = [{"role": "user", "content": f"Read this document.\n\n{docs[0]}\n\n{QUESTIONS[0]}"}]
        first = ask(client, a, tokens, True)
        for d in docs[1:]:  # two others take both slots: A's state goes to host RAM
            ask(client, [{"role": "user", "content": f"Read this document.\n\n{d}\n\n{QUESTIONS[1]}"}], tokens, True)
        a += [{"role": "assistant", "content": first["text"]}, {"role": "user", "content": QUESTIONS[2]}]
        back = ask(client, a, tokens, True)
        fresh = ask(client, a, tokens, False)
    finally:
        server.stop()
    keys = ("ttft_s", "prompt_ms", "cache_n", "prompt_n")
    return {"first": {k: first[k] for k in keys}, "back_from_ram": {k: back[k] for k in keys},
            "same_turn_fresh": {k: fresh[k] for k in keys}}


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--doc-tokens", type=int, default=1200)
    ap.add_argument("--tokens", type=int, default=128)
    add_rounds(ap, 2)
    ap.add_argument("--method", default="eagle3")
    add_threads(ap, 2)
    ap.add_argument("--cache-ram", type=int, default=0, help="MiB: also run the host-RAM scenario")
    ap.add_argument("--only-cache-ram", action="store_true", help="run the host-RAM scenario alone")


def run(a: argparse.Namespace) -> Result:
    if a.only_cache_ram:
        out = host_ram(a.cache_ram or 512, a.threads, a.method, a.doc_tokens, a.tokens)
        print(json.dumps(out, indent=1))
        return Result(rows=[{"turn": k, **v} for k, v in out.items()], detail={"cache_ram_mib": a.cache_ram or 512})
    import openai

    port = free_port()
    cmd = [sys.executable, "-m", "homespec", "serve", "--port", str(port), "--parallel", "2", "--ctx", "4096",
           "--threads", str(a.threads), "--method", a.method, "--queue", "4"]
    server = Proc("homespec serve", cmd, port, Path("/tmp/bench_reuse_server.log")).wait_ready()
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0, timeout=600)
    doc = document(a.doc_tokens)

    def arm(mode: str) -> dict:
        r = conversation(client, doc, a.turns, a.tokens, cache_prompt=mode == "reuse")
        print(f"{mode}: {r['wall_s']:.1f} s", flush=True)
        return r

    try:
        runs = alternate({"reuse": lambda: arm("reuse"), "fresh": lambda: arm("fresh")}, a.rounds)
        two = agents(client, doc, a.tokens)
    finally:
        server.stop()
    out = summarise(runs, two, a)
    print(json.dumps(out["summary"], indent=1))
    rows = [{"mode": m, "round": i + 1, **r} for m, rs in runs.items() for i, r in enumerate(rs)]
    s = out["summary"]
    return Result(rows=rows, ratios={k: s[k] for k in ("last_over_first_ttft_reuse", "fresh_over_reuse_wall")},
                  detail={"summary": s, "agents": two, "turns": a.turns, "doc_tokens": a.doc_tokens,
                          "tokens": a.tokens, "method": a.method, "threads": a.threads})


def summarise(runs: dict[str, list[dict]], two: list[dict], a: argparse.Namespace) -> dict:
    def per_turn(mode: str, key: str) -> list[float]:
        return [statistics.median(r["turns"][i][key] for r in runs[mode]) for i in range(a.turns)]

    reuse_ttft, fresh_ttft = per_turn("reuse", "ttft_s"), per_turn("fresh", "ttft_s")
    wall = {m: statistics.median(r["wall_s"] for r in runs[m]) for m in runs}
    summary = {
        "ttft_s": {"reuse": [round(x, 3) for x in reuse_ttft], "fresh": [round(x, 3) for x in fresh_ttft]},
        "prompt_ms": {m: [round(x, 1) for x in per_turn(m, "prompt_ms")] for m in runs},
        "cache_n": per_turn("reuse", "cache_n"), "prompt_n_fresh": per_turn("fresh", "prompt_n"),
        "last_over_first_ttft_reuse": round(reuse_ttft[-1] / reuse_ttft[0], 3),
        "conversation_wall_s": {m: round(w, 2) for m, w in wall.items()},
        "fresh_over_reuse_wall": round(wall["fresh"] / wall["reuse"], 3),
        "agents": [{"cache_n": t["cache_n"], "prompt_n": t["prompt_n"], "prompt_ms": t["prompt_ms"]} for t in two],
    }
    return {"args": vars(a), "runs": runs, "agents": two, "summary": summary}

