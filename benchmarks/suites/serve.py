"""`homespec serve` under load: concurrency 1, 2, 4, 8 against real servers on 127.0.0.1, side by side.

    .venv/bin/python -m benchmarks serve [--concurrency 1,2,4,8] [--tokens 128] [--rounds 2]
        [--threads 1] [--ctx 512] [--server-draft TWIN.gguf] [--servers on,off,plain,draft] [--json FILE]

Servers, all started at once on the embedded SmolLM2 with --parallel (llama-server -np) = the largest
concurrency and --ctx tokens per sequence:

  homespec spec on    `homespec serve` (eagle3 with the shipped head, guarded: the default)
  homespec spec off   `homespec serve --method none`
  llama-server plain  llama.cpp's own server (scripts/build_llamacpp_tools.sh builds it from the llama.cpp
                      llama-cpp-python vendors; found in homespec's cache, or --server BIN)
  llama-server draft  the same with its eagle3 drafter (--server-draft: an eagle3 GGUF of the shipped head,
                      `homespec draft export`), else with its prompt-lookup drafter (--spec-type ngram-simple)

Each run sends a fixed set of requests (2 x concurrency, at least 4) from homespec's test prompts as
token ids to POST /v1/completions (greedy, streamed), `concurrency` clients at a time. For each
concurrency the servers run in turn, `--rounds` times with the order rotated each round. Per run:
total tokens/s (every answer's tokens over the wall time), per-user tokens/s (each answer's tokens
after the first over its time after the first), p50/p95 time to first token. Printed and written:
the medians over rounds and the ratios the targets name (the ratio of the medians, with the range
of the round-by-round ratios in brackets). Stops by itself.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import sys
import threading
import time
import urllib.request
from pathlib import Path

from benchmarks.harness import Proc, add_rounds, add_threads, free_port, smollm2
from benchmarks.results import Result



def complete(port: int, ids: list[int], tokens: int) -> tuple[float, float, int]:
    """One greedy streamed completion -> (time to first token, seconds after it, tokens)."""
    body = {"model": "m", "prompt": ids, "max_tokens": tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}, "cache_prompt": False}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    first, chunks, usage = None, 0, None
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if event.get("usage"):
                usage = event["usage"]["completion_tokens"]
            if any(c.get("text") for c in event.get("choices") or ()):
                chunks += 1
                first = first or time.perf_counter()
    end = time.perf_counter()
    first = first or end
    return first - t0, end - first, usage if usage is not None else chunks


SPEC = ("generation_tokens", "target_passes", "spec_decode_num_drafts", "spec_decode_num_draft_tokens",
        "spec_decode_num_accepted_tokens")


def spec_counters(port: int) -> dict[str, float]:
    """homespec's /metrics counters of what the guard chose ({} from a server without them)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode()
    except OSError:
        return {}
    out = {}
    for name in SPEC:
        m = re.search(rf"^homespec:{name}_total{{[^}}]*}} ([0-9.e+]+)$", text, re.M)
        if m:
            out[name] = float(m.group(1))
    return out


def run_clients(port: int, prompts: list[list[int]], concurrency: int, tokens: int) -> dict:
    """`concurrency` clients take the prompts in turn; -> the run's figures."""
    before = spec_counters(port)
    todo = list(prompts)
    lock = threading.Lock()
    results: list[tuple[float, float, int]] = []

    def client() -> None:
        while True:
            with lock:
                if not todo:
                    return
                p = todo.pop(0)
            r = complete(port, p, tokens)
            with lock:
                results.append(r)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():  # joined in slices, so Ctrl-C / SIGTERM reach the main thread at once
            t.join(0.5)
    wall = time.perf_counter() - t0
    ttft = sorted(r[0] for r in results)
    per_user = [(n - 1) / d for _, d, n in results if n > 1 and d > 0]
    return {"requests": len(results), "tokens": sum(r[2] for r in results), "wall_s": round(wall, 3),
            "total_tok_s": round(sum(r[2] for r in results) / wall, 3),
            "per_user_tok_s": round(statistics.mean(per_user), 3) if per_user else 0.0,
            "ttft_p50_s": round(_pct(ttft, 50), 4), "ttft_p95_s": round(_pct(ttft, 95), 4),
            "slowest_request_s": round(max(r[0] + r[1] for r in results), 3),
            **{k: v - before[k] for k, v in spec_counters(port).items() if k in before}}


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return 0.0
    return xs[min(len(xs) - 1, max(0, round(q / 100 * (len(xs) - 1))))]


SERVER_KEYS = ("on", "off", "plain", "draft")  # --servers: homespec spec on / off, llama-server plain / draft


def start_servers(a, model: str, par: int, logs: Path) -> list[Proc]:
    """Every server at once (an idle one waits for requests, costing nothing)."""
    hs = [sys.executable, "-m", "homespec", "serve", "--ctx", str(a.ctx), "--threads", str(a.threads),
          "--parallel", str(par), "--queue", str(4 * par)]
    binary = find_server(a.server)
    plain = [str(binary), "-m", model, "--host", "127.0.0.1", "-c", str(a.ctx * par), "-np", str(par),
             "-t", str(a.threads), "-tb", str(a.threads), "--no-webui"]
    if a.server_draft:
        draft = ["--spec-type", "draft-eagle3", "--spec-draft-model", a.server_draft, "--spec-draft-n-max", "4",
                 "--spec-draft-p-min", "0"]
    else:
        draft = ["--spec-type", "ngram-simple"]
    specs = [("homespec spec on", hs), ("homespec spec off", [*hs, "--method", "none"]),
             ("llama-server plain", plain), ("llama-server draft", [*plain, *draft])]
    keep = set(a.servers.split(",")) if a.servers else set(SERVER_KEYS)
    procs = []
    for (name, cmd), key in zip(specs, SERVER_KEYS):
        if key not in keep:
            continue
        port = free_port()
        procs.append(Proc(name, [*cmd, "--port", str(port)], port, logs / f"{re.sub(r'[^a-z]+', '-', name)}.log"))
    return [p.wait_ready() for p in procs]


def find_server(explicit: str | None) -> Path:
    if explicit:
        return Path(explicit)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "homespec" / "llama-tools"
    found = sorted(cache.glob("llama-*/bin/llama-server"))
    if not found:
        raise SystemExit("error: llama-server is not built\nhint: run `bash scripts/build_llamacpp_tools.sh`, "
                         "or pass --server BIN")
    return found[0]


def test_prompts(model: str, most: int) -> list[list[int]]:
    from homespec.backends.llamacpp.backend import LlamaCppBackend
    from homespec.backends.settings import BackendSettings
    from homespec.promptsets import load_prompts
    from homespec.session.encode import encode_prompt

    with LlamaCppBackend(model, BackendSettings(n_ctx=256, n_threads=1)) as b:
        ids = [encode_prompt(b.tokenizer, p.turns, True) for p in load_prompts("test")]
    return [p for p in ids if 24 <= len(p) <= 96][:most]


def decode_ceiling(model: str, prompts: list[list[int]], a, lanes: int = 4, steps: int = 24) -> dict:
    """llama_decode's own batch gain here: tokens/s of one step carrying `lanes` sequences' roots
    over one carrying one, in the engine's own backend with the servers' threads and context,
    alternated step by step. No server can batch better than this: it bounds c4 / c1."""
    from homespec.backends.llamacpp.multi import MultiSeqBackend, PrefillWork, TreeWork
    from homespec.backends.settings import BackendSettings

    settings = BackendSettings(n_ctx=a.ctx * lanes, n_threads=a.threads)
    times: dict[int, list[float]] = {1: [], lanes: []}
    b = MultiSeqBackend(model, settings, lanes=lanes, lane_ctx=a.ctx)
    try:
        last = []
        for lane in range(lanes):
            p = prompts[lane % len(prompts)]
            out = b.decode([PrefillWork(lane, tuple(p), True)])
            last.append(int(out[0].logits[-1].argmax()))
        for i in range(2 * steps):
            n = 1 if i % 2 == 0 else lanes
            t0 = time.perf_counter()
            outs = b.decode([TreeWork(lane, (last[lane],), (-1,)) for lane in range(n)])
            times[n].append(time.perf_counter() - t0)
            for lane, fwd in enumerate(outs):
                b.commit(lane, [0])
                last[lane] = int(fwd.logits[0].argmax())
    finally:
        b.close()
    rate = {n: n / statistics.median(ts) for n, ts in times.items()}
    return {"lanes": lanes, "tok_s_1": round(rate[1], 2), f"tok_s_{lanes}": round(rate[lanes], 2),
            "gain": round(rate[lanes] / rate[1], 3)}


def measure(procs: list[Proc], prompts: list[list[int]], levels: list[int], a) -> dict:
    out: dict = {"tokens": a.tokens, "rounds": a.rounds, "ctx": a.ctx, "threads": a.threads,
                 "server_draft": a.server_draft or "ngram-simple", "levels": {}}
    for p in procs:  # warm-up: first-call costs (and the guard's first timings) out of the figures
        run_clients(p.port, prompts[:2], 2, 8)
    for c in levels:
        batch = prompts[: max(4, 2 * c)]
        runs: dict[str, list[dict]] = {p.name: [] for p in procs}
        for i in range(a.rounds):
            k = i % len(procs)
            for p in procs[k:] + procs[:k]:
                runs[p.name].append(run_clients(p.port, batch, c, a.tokens))
                print(f"c={c} {p.name}: {runs[p.name][-1]}", flush=True)
        out["levels"][c] = {name: {"runs": rs, **_medians(rs)} for name, rs in runs.items()}
    return out


def _medians(runs: list[dict]) -> dict:
    return {f"median_{k}": round(statistics.median(r[k] for r in runs), 4)
            for k in ("total_tok_s", "per_user_tok_s", "ttft_p50_s", "ttft_p95_s")}


def report(out: dict, levels: list[int]) -> str:
    """The markdown table and the target ratios (also stored in `out`)."""
    names = list(out["levels"][levels[0]])
    lines = ["| concurrency | server | total tok/s | per-user tok/s | TTFT p50 s | TTFT p95 s |",
             "|---:|---|---:|---:|---:|---:|"]
    for c in levels:
        for n in names:
            m = out["levels"][c][n]
            lines.append(f"| {c} | {n} | {m['median_total_tok_s']:.1f} | {m['median_per_user_tok_s']:.1f} | "
                         f"{m['median_ttft_p50_s']:.3f} | {m['median_ttft_p95_s']:.3f} |")
    tot = {c: {n: out["levels"][c][n]["median_total_tok_s"] for n in names} for c in levels}
    pairs = [("spec_on_over_off", "spec on / spec off", "homespec spec on", "homespec spec off"),
             ("homespec_plain_over_llama_server_plain", "homespec plain / llama-server plain", "homespec spec off",
              "llama-server plain"),
             ("llama_server_draft_over_plain", "llama-server draft / plain", "llama-server draft", "llama-server plain")]
    pairs = [p for p in pairs if p[2] in names and p[3] in names]  # --servers may leave some out
    if pairs:
        lines += ["", "| concurrency | " + " | ".join(p[1] for p in pairs) + " |", "|---:|" + "---:|" * len(pairs)]
    for c in levels if pairs else []:
        r = {key: tot[c][a] / tot[c][b] for key, _, a, b in pairs}
        paired = {key: _paired(out["levels"][c][a]["runs"], out["levels"][c][b]["runs"]) for key, _, a, b in pairs}
        out["levels"][c]["ratios"] = {k: round(v, 3) for k, v in r.items()}
        out["levels"][c]["round_ratios"] = paired
        lines.append(f"| {c} | " + " | ".join(f"{r[k]:.2f}x ({min(v):.2f}-{max(v):.2f})" for k, v in paired.items())
                     + " |")
    if 1 in tot and 4 in tot:
        lines.append("")
        for n in names:
            ratio = tot[4][n] / tot[1][n]
            out.setdefault("c4_over_c1", {})[n] = round(ratio, 3)
            lines.append(f"concurrency 4 / concurrency 1 total tokens/s, {n}: {ratio:.2f}x")
    if "decode_ceiling" in out:
        d = out["decode_ceiling"]
        lines.append(f"llama_decode alone, {d['lanes']} sequences a step / 1 (tokens/s, no server): {d['gain']:.2f}x")
    return "\n".join(lines) + "\n"


def _paired(a: list[dict], b: list[dict]) -> list[float]:
    """Round by round total tokens/s of a over b: two servers that ran minutes apart in one round."""
    return [round(x["total_tok_s"] / y["total_tok_s"], 3) for x, y in zip(a, b)]


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--concurrency", default="1,2,4,8")
    ap.add_argument("--tokens", type=int, default=128)
    add_rounds(ap, 2)
    ap.add_argument("--ctx", type=int, default=512)
    # one thread each: two threads per server spin on each other at llama.cpp's barriers whenever
    # the shared CPU deschedules one, which stalls single requests for tens of seconds
    add_threads(ap, 1)
    ap.add_argument("--servers", default=None,
                    help="which servers, comma-separated from on,off,plain,draft (default: all four)")
    ap.add_argument("--server", default=None, help="llama-server binary (default: homespec's cache)")
    ap.add_argument("--server-draft", default=None, help="eagle3 GGUF for llama-server's drafter")
    ap.add_argument("--logs", default="/tmp", help="folder for the servers' logs")


def run(a: argparse.Namespace) -> Result:
    levels = [int(c) for c in a.concurrency.split(",")]
    unknown = set(a.servers.split(",")) - set(SERVER_KEYS) if a.servers else set()
    if unknown or a.servers == "":
        raise SystemExit(f"error: --servers {a.servers!r}: pick from {','.join(SERVER_KEYS)}\n"
                         "hint: e.g. --servers on,off,plain")

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the servers are stopped on the way out
    model = str(smollm2())
    prompts = test_prompts(model, 2 * max(levels))
    ceiling = decode_ceiling(model, prompts, a)
    procs = start_servers(a, model, max(levels), Path(a.logs))
    try:
        out = measure(procs, prompts, levels, a)
    finally:
        for p in procs:
            p.stop()
    out["decode_ceiling"] = ceiling
    table = report(out, levels)
    print(table)
    out["table"] = table
    rows = [{"concurrency": c, "server": name, "round": i + 1, **r}
            for c, lv in out["levels"].items() for name, m in lv.items() if isinstance(m, dict) and "runs" in m
            for i, r in enumerate(m["runs"])]
    ratios = {f"{k}_c{c}": v for c, lv in out["levels"].items() for k, v in lv.get("ratios", {}).items()}
    ratios |= {f"c4_over_c1_{n}": v for n, v in out.get("c4_over_c1", {}).items()}
    return Result(rows=rows, ratios=ratios, detail=out)

