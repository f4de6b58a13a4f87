"""A bounded soak of `homespec serve`: many clients, every kind of request, for a fixed time.

    .venv/bin/python -m benchmarks soak_serve [--clients 16] [--seconds 300] [--url URL --pid PID] [--json FILE]

Without --url it starts a server on 127.0.0.1 (the embedded SmolLM2, 4 slots, --ctx 2048, the ChatML
template with tools, the default drafter and guard) and stops it at the end. `--clients` threads send,
one after another for `--seconds`, a mix of requests through the official openai client:

    stream     a streamed chat answer with usage (64 tokens)       25 %
    cancel     a streamed answer the client leaves after 2 chunks  10 %
    malformed  a body the server must refuse (bad JSON, a wrong field, an unknown tool choice)  10 %
    tools      tool_choice required over two tools (60 tokens)     10 %
    schema     response_format json_schema (80 tokens)             10 %
    whole      a non-streamed chat answer (32 tokens)              10 %
    anthropic  the Anthropic SDK: /v1/messages, half streamed, half a forced tool_use (48 tokens)  15 %
    responses  a stored Responses answer, then one chained to it by previous_response_id (24 + 24)  10 %

Checked at the end, and printed with the figures: every request got an answer or an HTTP error (a
dropped connection or a hang is "lost"); every lane free and no live sequence (/slots, /metrics);
the server's RSS at the end within 10 % of its value after the first minute (or after a fifth of a
shorter run; the response store is bounded, so it must not grow with the run); every schema answer
valid, every forced call a call, every Anthropic answer a message with a stop reason, every chained
response chained. Also counted: the chained responses whose prompt came from a slot's cache. Figures: time to first token
(p50 / p95, streamed answers), tokens per second per stream and in total, requests by outcome.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import threading
import time
from dataclasses import asdict, dataclass
from urllib.parse import urlsplit

from benchmarks.harness import ROOT, add_threads, use_tests
from benchmarks.results import Result


KINDS = (("stream", 25), ("cancel", 10), ("malformed", 10), ("tools", 10), ("schema", 10), ("whole", 10),
         ("anthropic", 15), ("responses", 10))
QUESTIONS = ["What is the capital of France?", "Write a haiku about rain.", "Explain photosynthesis briefly.",
             "Give me three tips for sleeping well.", "What is 17 plus 25?", "Describe a cat in two sentences."]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
             "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
         {"type": "function", "function": {"name": "get_time", "parameters": {
             "type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}}]
SCHEMA = {"type": "object", "properties": {"topic": {"type": "string"}, "words": {"type": "integer"}},
          "required": ["topic", "words"], "additionalProperties": False}
MALFORMED = ['{"messages": [', '{"messages": []}', '{"messages": [{"role": "user", "content": "hi"}], "n": 2}',
             '{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": '
             '{"name": "f"}}], "tool_choice": {"type": "function", "function": {"name": "g"}}}',
             '{"messages": [{"role": "user", "content": "hi"}], "temperature": 9}']


@dataclass
class Outcome:
    kind: str
    result: str  # ok | http-4xx | http-5xx | lost
    ttft_s: float | None = None
    tokens: int = 0
    seconds: float = 0.0
    check: bool = True  # the answer is what its kind promises (valid JSON, a call)
    reused: bool | None = None  # responses: the chained request's prompt came from a slot's cache
    error: str | None = None  # lost: what the client raised; a failed check: what the answer was


def one(client, base: str, kind: str, rng: random.Random) -> Outcome:
    import openai

    t0 = time.perf_counter()
    messages = [{"role": "user", "content": rng.choice(QUESTIONS)}]
    try:
        if kind == "malformed":
            status = _post(base, rng.choice(MALFORMED))
            return Outcome(kind, f"http-{status // 100}xx", seconds=time.perf_counter() - t0, check=status == 400)
        if kind in ("stream", "cancel"):
            return _stream(client, messages, kind, t0)
        if kind == "anthropic":
            return _anthropic(base, messages, rng, t0)
        if kind == "responses":
            return _chained(client, messages[0]["content"], t0)
        if kind == "tools":
            r = client.chat.completions.create(model="m", messages=messages, tools=TOOLS, tool_choice="required",
                                               parallel_tool_calls=False, max_tokens=60, temperature=0.7)
            calls = r.choices[0].message.tool_calls or []
            ok = r.choices[0].finish_reason == "length" or (len(calls) == 1 and _json(calls[0].function.arguments))
            why = None if ok else (f"finish {r.choices[0].finish_reason}, {len(calls)} calls "
                                   f"{[c.function.arguments[:80] for c in calls]}, content {r.choices[0].message.content!r:.80}")
            return Outcome(kind, "ok", tokens=r.usage.completion_tokens, seconds=time.perf_counter() - t0, check=ok,
                           error=why)
        if kind == "schema":
            r = client.chat.completions.create(model="m", messages=messages, max_tokens=80, temperature=0.7,
                                               response_format={"type": "json_schema",
                                                                "json_schema": {"name": "s", "schema": SCHEMA}})
            ok = r.choices[0].finish_reason == "length" or set(json.loads(r.choices[0].message.content)) == {"topic",
                                                                                                             "words"}
            return Outcome(kind, "ok", tokens=r.usage.completion_tokens, seconds=time.perf_counter() - t0, check=ok)
        r = client.chat.completions.create(model="m", messages=messages, max_tokens=32, temperature=0.7)
        return Outcome(kind, "ok", tokens=r.usage.completion_tokens, seconds=time.perf_counter() - t0)
    except (openai.APIStatusError, _anthropic_status()) as e:
        return Outcome(kind, f"http-{e.status_code // 100}xx", seconds=time.perf_counter() - t0,
                       check=e.status_code == 503)  # busy: the queue was full, said with Retry-After
    except Exception as e:  # noqa: BLE001 - a dropped connection, a timeout: the request is lost
        return Outcome(kind, "lost", seconds=time.perf_counter() - t0, check=False,
                       error=f"{type(e).__name__}: {e}"[:300])


def _stream(client, messages, kind: str, t0: float) -> Outcome:
    stream = client.chat.completions.create(model="m", messages=messages, max_tokens=64, temperature=0.7,
                                            stream=True, stream_options={"include_usage": True})
    ttft, tokens, chunks = None, 0, 0
    for c in stream:
        if c.choices and c.choices[0].delta.content:
            ttft = ttft if ttft is not None else time.perf_counter() - t0
            chunks += 1
            if kind == "cancel" and chunks == 2:
                stream.close()
                return Outcome(kind, "ok", ttft, seconds=time.perf_counter() - t0)
        if c.usage is not None:
            tokens = c.usage.completion_tokens
    return Outcome(kind, "ok", ttft, tokens, time.perf_counter() - t0)


def _anthropic_status():
    import anthropic

    return anthropic.APIStatusError


def _anthropic(base: str, messages: list, rng: random.Random, t0: float) -> Outcome:
    import anthropic

    client = anthropic.Anthropic(base_url=base, api_key="any", max_retries=0, timeout=300)
    if rng.random() < 0.5:
        with client.messages.stream(model="m", max_tokens=48, messages=messages) as stream:
            ttft = None
            for event in stream:
                if event.type == "content_block_delta" and ttft is None:
                    ttft = time.perf_counter() - t0
            m = stream.get_final_message()
        return Outcome("anthropic", "ok", ttft, m.usage.output_tokens, time.perf_counter() - t0,
                       check=m.stop_reason in ("end_turn", "max_tokens", "stop_sequence"))
    tools = [{"name": t["function"]["name"], "input_schema": t["function"]["parameters"]} for t in TOOLS]
    m = client.messages.create(model="m", max_tokens=48, messages=messages, tools=tools, tool_choice={"type": "any"})
    used = [b for b in m.content if b.type == "tool_use"]
    return Outcome("anthropic", "ok", tokens=m.usage.output_tokens, seconds=time.perf_counter() - t0,
                   check=m.stop_reason == "max_tokens" or (m.stop_reason == "tool_use" and bool(used)))


def _chained(client, question: str, t0: float) -> Outcome:
    first = client.responses.create(model="m", input=question, max_output_tokens=24, temperature=0.7)
    second = client.responses.create(model="m", input="Say it again, shorter.", previous_response_id=first.id,
                                     max_output_tokens=24, temperature=0.7)
    cached = second.usage.input_tokens_details.cached_tokens
    return Outcome("responses", "ok", tokens=first.usage.output_tokens + second.usage.output_tokens,
                   seconds=time.perf_counter() - t0, check=second.previous_response_id == first.id,
                   reused=cached >= first.usage.input_tokens)


def _post(base: str, body: str) -> int:
    url = urlsplit(base)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=120)
    try:
        conn.request("POST", "/v1/chat/completions", body=body.encode(), headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        r.read()
        return r.status
    finally:
        conn.close()


def _json(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def soak(base: str, clients: int, seconds: float, pid: int | None, seed: int = 0) -> dict:
    """Run the soak against the server at `base` (`pid`: its process, for RSS) -> the report."""
    import openai
    import psutil

    proc = psutil.Process(pid) if pid else None
    outcomes: list[Outcome] = []
    lock = threading.Lock()
    end = time.monotonic() + seconds
    rss: list[tuple[float, int]] = []

    def client_loop(i: int) -> None:
        rng = random.Random(seed * 1000 + i)
        client = openai.OpenAI(base_url=base + "/v1", api_key="any", max_retries=0, timeout=300)
        names, weights = zip(*KINDS)
        while time.monotonic() < end:
            out = one(client, base, rng.choices(names, weights)[0], rng)
            with lock:
                outcomes.append(out)
            if out.result == "http-5xx":
                time.sleep(1.0)  # busy: Retry-After says at least a second

    threads = [threading.Thread(target=client_loop, args=(i,), daemon=True) for i in range(clients)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        if proc is not None:
            rss.append((time.monotonic() - t0, proc.memory_info().rss))
        time.sleep(2.0)
    return report(base, outcomes, rss, time.monotonic() - t0, seconds)


def report(base: str, outcomes: list[Outcome], rss: list[tuple[float, int]], wall: float, seconds: float) -> dict:
    slots = json.loads(_get(base, "/slots"))
    metrics = _get(base, "/metrics")
    live = next((float(line.split()[-1]) for line in metrics.splitlines()
                 if line.startswith("homespec:live_sequences")), None)
    streamed = [o for o in outcomes if o.kind == "stream" and o.ttft_s is not None]
    ttft = sorted(o.ttft_s for o in streamed)
    per_stream = [(o.tokens - 1) / (o.seconds - o.ttft_s) for o in streamed if o.tokens > 1 and o.seconds > o.ttft_s]
    mark = min(60.0, seconds / 5)
    after = [b for t, b in rss if t >= mark]
    rss_growth = (rss[-1][1] / after[0] - 1) if after and rss else None
    by = {}
    for o in outcomes:
        by.setdefault(o.kind, {}).setdefault(o.result, 0)
        by[o.kind][o.result] += 1
    return {
        "requests": len(outcomes), "by_kind": by, "lost": sum(o.result == "lost" for o in outcomes),
        "failed_checks": [asdict(o) for o in outcomes if not o.check][:20],
        "lost_errors": [o.error for o in outcomes if o.result == "lost"][:20],
        "lanes_free": all(not s["is_processing"] for s in slots), "live_sequences": live,
        "ttft_p50_s": _pct(ttft, 0.5), "ttft_p95_s": _pct(ttft, 0.95),
        "tok_s_per_stream_p50": _pct(sorted(per_stream), 0.5),
        "tok_s_total": sum(o.tokens for o in outcomes) / wall if wall > 0 else 0.0,
        "rss_after_warmup_mib": after[0] / 2**20 if after else None, "rss_end_mib": rss[-1][1] / 2**20 if rss else None,
        "rss_growth": rss_growth, "wall_s": wall,
        "chains_reusing_cache": sum(o.reused is True for o in outcomes),
        "chains": sum(o.reused is not None for o in outcomes),
    }


def _get(base: str, path: str) -> str:
    url = urlsplit(base)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    try:
        conn.request("GET", path)
        return conn.getresponse().read().decode()
    finally:
        conn.close()


def _pct(values: list[float], q: float) -> float | None:
    return values[min(len(values) - 1, int(q * len(values)))] if values else None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--seconds", type=float, default=300)
    p.add_argument("--url", help="a running server's base URL (default: start one)")
    p.add_argument("--pid", type=int, help="the running server's process id, for its RSS")
    add_threads(p, 2)


def run(args: argparse.Namespace) -> Result:
    server = None
    if args.url is None:
        use_tests()
        from tests.server.test_server import Server

        server = Server("--ctx", "2048", "--threads", str(args.threads), "--parallel", "4", "--queue", "64",
                        "--chat-template-file", str(ROOT / "homespec" / "data" / "templates" / "chatml-tools.jinja"))
        server.wait_ready()
        base, pid = server.base, server.proc.pid
    else:
        base, pid = args.url.rstrip("/").removesuffix("/v1"), args.pid
    try:
        out = soak(base, args.clients, args.seconds, pid)
    finally:
        if server is not None:
            server.stop()
    print(json.dumps({k: v for k, v in out.items() if k != "failed_checks"}, indent=1))
    ok = out["lost"] == 0 and out["lanes_free"] and not out["failed_checks"] and (
        out["rss_growth"] is None or out["rss_growth"] <= 0.10)
    rows = [{"kind": k, **v} for k, v in out["by_kind"].items()]
    return Result(rows=rows, detail={k: v for k, v in out.items() if k != "by_kind"}, status=0 if ok else 1)

