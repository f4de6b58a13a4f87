"""`homespec serve` against a hostile new user's requests, and a shutdown during 10 streams.

    .venv/bin/python -m benchmarks hostile_serve [--threads 2] [--streams 10] [--json FILE]

1. Requests: a server (the embedded SmolLM2, plain decoding, 2 slots, the ChatML template with
   tools) gets each request of the list below; a request passes when its status is the one it
   should be and a refusal is OpenAI's error body ({"error": {message, type, param, code}}).
2. Queue (class 7): a server of 1 slot and 8 waiting places gets 40 streamed requests whose clients
   close their connections at once, then an innocent request (it must get 200, not "busy"); then a
   body short of its Content-Length (it must get 408).
3. Drain: a fresh server gets --streams streaming requests (chat, text and Responses in turn, 2000
   tokens each: more than it decodes before the drain ends), then SIGTERM once; then the same with
   SIGINT twice, 0.3 s apart. Reported: for each client whether its stream ended in its route's
   shape (chat and text: an error event, then `data: [DONE]`; Responses: `error`, then
   `response.failed`), the exit code, the seconds from the first signal to the exit, and whether
   the log holds a traceback.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

from benchmarks.harness import ROOT, add_threads
from benchmarks.results import Result

TEMPLATE = ROOT / "homespec" / "data" / "templates" / "chatml-tools.jinja"
ASK = [{"role": "user", "content": "Is the sea blue? Answer yes or no."}]


def _chat(**kw) -> tuple[str, dict]:
    return "/v1/chat/completions", {"model": "x", "messages": ASK, "max_tokens": 8, "temperature": 0, **kw}


def _props(n: int, required: bool) -> dict:
    p = {f"p{i}": {"type": "integer"} for i in range(n)}
    return {"type": "object", "properties": p, **({"required": list(p)} if required else {})}


def _pydantic_tool() -> dict:
    """What openai.pydantic_function_tool writes for a model with a nested one ($defs, $ref)."""
    import openai
    from pydantic import BaseModel

    class Loc(BaseModel):
        city: str
        country: str

    class GetWeather(BaseModel):
        location: Loc

    return openai.pydantic_function_tool(GetWeather)


def requests() -> list[tuple[int, str, str, dict, int]]:
    """(class, what, path, body, expected status)."""
    tool = _pydantic_tool()
    return [
        (2, 'grammar root ::= "yes" | "no"', *_chat(grammar='root ::= "yes" | "no"'), 200),
        (2, "grammar root ::= [0-9]+", *_chat(grammar="root ::= [0-9]+"), 200),
        (2, "grammar root ::= (  (malformed)", *_chat(grammar="root ::= ("), 400),
        (3, "forced call, pydantic tool with $defs", *_chat(tools=[tool], tool_choice="required", max_tokens=60), 200),
        (3, "forced named call, pydantic tool", *_chat(tools=[tool], tool_choice={
            "type": "function", "function": {"name": "GetWeather"}}, max_tokens=60), 200),
        (4, "response_format, 10,000 optional properties", *_chat(response_format={
            "type": "json_schema", "json_schema": {"name": "big", "schema": _props(10_000, False)}}), 400),
        (4, "json_schema, 5,000 optional properties", *_chat(json_schema=_props(5_000, False)), 400),
        (6, "/tokenize with a lone surrogate", "/tokenize", {"content": "a\ud800b"}, 400),
        (6, "/detokenize with 1.5 M ids", "/detokenize", {"tokens": [42] * 1_500_000}, 400),
        (6, "tool_choice required without tools", *_chat(tool_choice="required"), 400),
        (6, "tool_choice named without tools", *_chat(tool_choice={"type": "function", "function": {"name": "f"}}),
         400),
        (6, "grammar with response_format", *_chat(grammar='root ::= "a"', response_format={"type": "json_object"}),
         400),
        (6, 'self-referencing schema {"$ref": "#"}', *_chat(response_format={
            "type": "json_schema", "json_schema": {"name": "self", "schema": {"$ref": "#"}}}), 400),
        (6, "17 stop strings", *_chat(stop=[f"s{i}" for i in range(17)]), 400),
    ]


def start(threads: int, *extra: str) -> tuple[subprocess.Popen, int, list[str]]:
    p = subprocess.Popen([sys.executable, "-m", "homespec", "serve", "--port", "0", "--method", "none",
                          "--threads", str(threads), *extra], cwd=ROOT, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    err: list[str] = []
    threading.Thread(target=lambda: err.extend(p.stderr), daemon=True).start()
    m = re.search(r"http://127\.0\.0\.1:(\d+)/v1", p.stdout.readline())
    if m is None:
        p.kill()
        raise SystemExit("serve did not start: " + "".join(err)[-2000:])
    return p, int(m.group(1)), err


def post(port: int, path: str, body: dict) -> tuple[int, dict | None]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    raw = r.read()
    c.close()
    try:
        return r.status, json.loads(raw)
    except ValueError:
        return r.status, None


def run_requests(threads: int) -> list[dict]:
    p, port, _ = start(threads, "--parallel", "2", "--ctx", "1024", "--chat-template-file", str(TEMPLATE))
    rows = []
    try:
        for cls, what, path, body, expected in requests():
            t0 = time.monotonic()
            status, out = post(port, path, body)
            err = (out or {}).get("error")
            shaped = status < 400 or (isinstance(err, dict) and set(err) == {"message", "type", "param", "code"})
            rows.append({"class": cls, "request": what, "status": status, "expected": expected,
                         "seconds": round(time.monotonic() - t0, 2), "passed": status == expected and shaped,
                         "says": err["message"][:200] if isinstance(err, dict) else None})
            r = rows[-1]
            print(f"{'ok  ' if r['passed'] else 'FAIL'} class {cls}  {what:<46} {status} in {r['seconds']:5.2f} s  "
                  f"{r['says'] or ''}"[:200], flush=True)
    finally:
        p.terminate()
        p.wait(60)
    return rows


def _leave_at_once(port: int, n: int) -> None:
    """`n` clients that each send a streamed chat request and close their connection at once."""
    import socket

    body = json.dumps({"model": "x", "messages": ASK, "max_tokens": 64, "stream": True}).encode()
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        socks.append(s)
    time.sleep(0.2)  # each request is read and queued (or refused: the queue holds 8)
    for s in socks:
        s.close()


def _short_body(port: int) -> tuple[int, float]:
    """A body short of its Content-Length: (status, seconds to the answer)."""
    import socket

    s = socket.create_connection(("127.0.0.1", port))
    t0 = time.monotonic()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{\"messages\": [")
    s.settimeout(60)
    got = s.recv(200)
    s.close()
    return int(got.split(b" ")[1]) if got.startswith(b"HTTP/1.1") else 0, time.monotonic() - t0


def run_queue(threads: int) -> list[dict]:
    """Class 7 on a server of 1 slot and 8 waiting places."""
    p, port, _ = start(threads, "--parallel", "1", "--queue", "8", "--ctx", "1024")
    rows = []
    try:
        _leave_at_once(port, 40)
        t0 = time.monotonic()
        status, out = post(port, *_chat(max_tokens=4))
        rows.append({"class": 7, "request": "innocent, after 40 clients opened a stream and left", "status": status,
                     "expected": 200, "seconds": round(time.monotonic() - t0, 2), "passed": status == 200,
                     "says": (out or {}).get("error", {}).get("message") if status != 200 else None})
        status, seconds = _short_body(port)
        rows.append({"class": 7, "request": "a body short of its Content-Length", "status": status, "expected": 408,
                     "seconds": round(seconds, 2), "passed": status == 408, "says": None})
        for r in rows:
            print(f"{'ok  ' if r['passed'] else 'FAIL'} class 7  {r['request']:<46} {r['status']} in "
                  f"{r['seconds']:5.2f} s  {r['says'] or ''}", flush=True)
    finally:
        p.terminate()
        p.wait(60)
    return rows


ROUTES = [("/v1/chat/completions", {"model": "x", "max_tokens": 2000, "temperature": 0,
                                    "messages": [{"role": "user", "content": "Tell a very long story."}]}),
          ("/v1/completions", {"model": "x", "max_tokens": 2000, "temperature": 0,
                               "prompt": "Once upon a time, in a land far away,"}),
          ("/v1/responses", {"model": "x", "input": "Tell a very long story.", "max_output_tokens": 2000,
                             "temperature": 0})]


def _stream(port: int, path: str, body: dict, out: list) -> None:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    try:
        c.request("POST", path, json.dumps({**body, "stream": True}), {"Content-Type": "application/json"})
        r = c.getresponse()
        out.append(("status", r.status))
        for raw in r:
            line = raw.decode().rstrip("\n")
            if line.startswith(("data: ", "event: ")):
                out.append(tuple(line.split(": ", 1)))
    except (OSError, http.client.HTTPException) as e:
        out.append(("cut", type(e).__name__))
    finally:
        c.close()


def ended_cleanly(path: str, events: list) -> bool:
    if not events or events[0] != ("status", 200) or any(k == "cut" for k, _ in events):
        return False
    data = [v for k, v in events if k == "data"]
    if path == "/v1/responses":
        kinds = [v for k, v in events if k == "event"]
        return kinds[-2:] in (["error", "response.failed"], ["response.output_item.done", "response.completed"])
    return len(data) >= 2 and data[-1] == "[DONE]" and ("error" in json.loads(data[-2]) or
                                                        json.loads(data[-2])["choices"][0]["finish_reason"])


def run_drain(threads: int, streams: int, signals: tuple[str, ...]) -> dict:
    p, port, err = start(threads, "--parallel", "4", "--ctx", "4096")
    runs = []
    for i in range(streams):
        path, body = ROUTES[i % len(ROUTES)]
        out: list = []
        t = threading.Thread(target=_stream, args=(port, path, body, out), daemon=True)
        t.start()
        runs.append((path, out, t))
    deadline = time.monotonic() + 120
    while sum(1 for _, out, _ in runs if len(out) > 2) < min(streams, 4) and time.monotonic() < deadline:
        time.sleep(0.05)  # every slot's stream has begun; the rest wait for a slot
    t0 = time.monotonic()
    for name in signals:
        p.send_signal(getattr(signal, name))
        time.sleep(0.3)
    code = p.wait(120)
    exit_s = time.monotonic() - t0
    for _, _, t in runs:
        t.join(30)
    log = "".join(err)
    clean = [ended_cleanly(path, out) for path, out, _ in runs]
    row = {"signals": list(signals), "streams": streams, "clean_ends": sum(clean), "exit_code": code,
           "exit_s": round(exit_s, 2), "traceback_in_log": "Traceback" in log or "Exception in ASGI" in log,
           "ends": [{"route": path, "clean": c, "last": [v for _, v in out[-2:]]} for (path, out, _), c in
                    zip(runs, clean)]}
    print(f"{'+'.join(signals)}: {row['clean_ends']}/{streams} streams ended cleanly, exit {code} after "
          f"{row['exit_s']:.2f} s, traceback in the log: {row['traceback_in_log']}", flush=True)
    return row


def add_arguments(ap: argparse.ArgumentParser) -> None:
    add_threads(ap, 2)
    ap.add_argument("--streams", type=int, default=10)


def run(a: argparse.Namespace) -> Result:
    rows = run_requests(a.threads) + run_queue(a.threads)
    drains = [run_drain(a.threads, a.streams, sig) for sig in (("SIGTERM",), ("SIGINT", "SIGINT"))]
    ok = all(r["passed"] for r in rows) and all(d["clean_ends"] == d["streams"] and d["exit_code"] == 0 and
                                                not d["traceback_in_log"] for d in drains)
    return Result(rows=rows, detail={"load_average": round(os.getloadavg()[0], 2), "drain": drains},
                  status=0 if ok else 1)

