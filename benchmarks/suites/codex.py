"""Codex CLI against `homespec serve`: `codex exec PROMPT` N times, each timed.

    .venv/bin/python -m benchmarks codex [--runs 5] [--prompt "say hi"] [--url URL --key KEY] [--json FILE]

Codex CLI is the npm package @openai/codex pinned in tests/codex/package.json, installed there
with npm on first use. Without --url the script starts a server on 127.0.0.1 (the embedded
SmolLM2, one slot of --ctx 12288 tokens: Codex's own instructions and tool list make a prompt of
~9,000 tokens, beyond SmolLM2's trained 8,192; `--max-tokens 256`, llama-server's -n: Codex sets no
output limit). Codex reaches it as a custom provider speaking the Responses API
(`-c model_providers.homespec={base_url=..., wire_api="responses", env_key=...}`), each run in a
fresh working folder, all with one CODEX_HOME, read-only sandbox, no approvals. A run passes when codex
exits 0 within --timeout seconds; its last message, exit code, time and (with the script's own server)
the requests it made, as the server logged them (prompt and answer tokens, seconds, finish), are recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from benchmarks.harness import ROOT, add_threads, use_tests
from benchmarks.results import Result

CODEX_DIR = ROOT / "tests" / "codex"
KEY = "codex-measure-key"


def codex_binary() -> tuple[Path | None, str]:
    """The pinned Codex CLI, installed with npm if need be -> (its path, or None and why not)."""
    binary = CODEX_DIR / "node_modules" / ".bin" / "codex"
    if binary.exists():
        return binary, ""
    if shutil.which("node") is None or shutil.which("npm") is None:
        return None, "node and npm are not installed"
    done = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--silent"], cwd=CODEX_DIR,
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0 or not binary.exists():
        return None, f"npm could not install @openai/codex: {done.stderr.strip()[-300:]}"
    return binary, ""


def run_codex(binary: Path, base: str, key: str, prompt: str, timeout: float,
              stop_when: Callable[[], bool] | None = None, grace: float = 30.0, home: str | None = None) -> dict:
    """One `codex exec PROMPT` against the server at `base` (…/v1) -> exit code, seconds, last message.
    `stop_when`: polled while Codex runs; once true, Codex has `grace` seconds to end on its own and is
    then stopped (its exit is None, as past `timeout`). `home`: Codex's CODEX_HOME (default a fresh one)."""
    with tempfile.TemporaryDirectory(prefix="codex-home-") as fresh, tempfile.TemporaryDirectory(prefix="codex-work-") \
            as work:
        home = home or fresh
        # Codex drops a stream that sends nothing for 300 s (and retries): a cold prompt of ~9,000 tokens on
        # a busy 2-core CPU takes longer than that to read, so the wait is raised to the run's own timeout
        provider = (f'{{name="homespec", base_url="{base}", wire_api="responses", env_key="HOMESPEC_CODEX_KEY", '
                    f'stream_idle_timeout_ms={int(timeout * 1000)}}}')
        last = Path(work) / "last.txt"
        cmd = [str(binary), "exec", "--skip-git-repo-check", "--sandbox", "read-only", "-c", "model_provider=homespec",
               "-c", f"model_providers.homespec={provider}", "-m", "smol", "--output-last-message", str(last), prompt]
        # warnings too: a stream Codex drops and re-sends ("Reconnecting... n/5") is logged with its cause
        env = {"RUST_LOG": "warn", **os.environ, "CODEX_HOME": home, "HOMESPEC_CODEX_KEY": key}
        t0 = time.monotonic()
        with tempfile.TemporaryFile(mode="w+") as err_file:
            # its own process group: `codex` is a node wrapper around the native binary, and stopping the
            # wrapper alone left the binary running its turns against the server beside the next run's
            proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=err_file,
                                    stdin=subprocess.DEVNULL, text=True, start_new_session=True)
            code = _wait(proc, t0 + timeout, stop_when, grace)
            seconds = time.monotonic() - t0
            err_file.seek(0)
            err = err_file.read()
        answer = last.read_text() if last.exists() else ""
    return {"exit": code, "seconds": round(seconds, 1), "answer": answer.strip(),
            "errors": [line for line in err.splitlines() if "ERROR" in line or "WARN" in line][-12:]}


def _wait(proc: subprocess.Popen, deadline: float, stop_when: Callable[[], bool] | None, grace: float) -> int | None:
    """Codex's exit code, or None where it was stopped: at `deadline`, or `grace` seconds after `stop_when`."""
    while proc.poll() is None:
        now = time.monotonic()
        if stop_when is not None and stop_when():
            deadline, stop_when = min(deadline, now + grace), None
        if now >= deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return None
        time.sleep(0.5)
    return proc.returncode


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--prompt", default="say hi")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds a run may take to pass")
    p.add_argument("--give-up", type=float, default=600.0, help="seconds after which a run is stopped (a run past "
                   "--timeout has failed, but its time is still recorded up to here)")
    p.add_argument("--warmup", type=int, default=0, help="untimed runs first (they leave Codex's prompt in the "
                   "slot's cache, as any earlier Codex session on the server does)")
    p.add_argument("--url", help="a running server's base URL (…/v1; default: start one)")
    p.add_argument("--key", default=KEY)
    p.add_argument("--serve-args", default="", help="more flags for the server this script starts (e.g. "
                   "\"--temp 0\": Codex sends no sampling fields, so the server's defaults decide)")
    add_threads(p, 2)


def run(args: argparse.Namespace) -> Result:
    binary, why = codex_binary()
    if binary is None:
        sys.exit(f"error: {why}")
    server = None
    if args.url is None:
        use_tests()
        from tests.server.test_server import Server

        server = Server("--ctx", "12288", "--parallel", "1", "--threads", str(args.threads), "--max-tokens", "256",
                        "--api-key", args.key, *args.serve_args.split()).wait_ready()
        base = server.base + "/v1"
    else:
        base = args.url.rstrip("/")
    version = subprocess.run([str(binary), "--version"], capture_output=True, text=True).stdout.strip()
    runs, warm = [], []
    # one CODEX_HOME for the whole measurement, as a user has one: Codex writes its path into the prompt
    # (the skills' root), so a fresh one per run would change the prompt ~650 tokens before its end
    home = tempfile.TemporaryDirectory(prefix="codex-home-")
    try:
        for _ in range(args.warmup):
            warm.append(run_codex(binary, base, args.key, args.prompt, args.give_up, home=home.name))
            print(f"warm-up: exit {warm[-1]['exit']}, {warm[-1]['seconds']} s", flush=True)
        for i in range(args.runs):
            seen = len(server.err) if server is not None else 0
            run = run_codex(binary, base, args.key, args.prompt, args.give_up, home=home.name)
            if server is not None:  # the requests the run made, as the server logged them
                run["requests"] = [line.strip().removeprefix("homespec serve: ") for line in server.err[seen:]
                                   if "POST /v1/responses" in line]
            run["pass"] = run["exit"] == 0 and run["seconds"] <= args.timeout
            runs.append(run)
            print(f"run {i + 1}: exit {run['exit']}, {run['seconds']} s, pass {run['pass']}: {run['answer'][:80]!r}",
                  flush=True)
    finally:
        home.cleanup()
        if server is not None:
            server.stop()
    out = {"codex": version, "prompt": args.prompt, "timeout_s": args.timeout, "warmup": warm, "runs": runs,
           "passed": sum(r["pass"] for r in runs), "serve_args": args.serve_args if server is not None else None}
    print(json.dumps({k: v for k, v in out.items() if k != "runs"}))
    return Result(rows=runs, detail={k: v for k, v in out.items() if k != "runs"})

