"""llama.cpp's own server beside homespec (`homespec bench --against llama-server`, benchmarks/suites/llamacpp.py).

A `Server` is one llama-server process on 127.0.0.1 (the binary scripts/build_llamacpp_tools.sh builds from the
llama.cpp that llama-cpp-python vendors); requests are greedy, uncached `/completion` calls on token ids, so the
server decodes exactly the prompts homespec decodes. Its figures come from the response's own `timings`:
tokens/s = predicted_n / predicted_ms, and tokens per target pass = predicted_n / (predicted_n -
draft_n_accepted), since each verification step emits its accepted drafts plus one token of the target's.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from homespec.errors import HomespecError, UsageError

VERSION = "0.3.36"  # the llama-cpp-python whose vendored llama.cpp the server is built from


def find_server(explicit: str | None = None) -> Path:
    """--server, else the build in homespec's cache (scripts/build_llamacpp_tools.sh)."""
    import os

    if explicit:
        p = Path(explicit)
        if not (p.is_file() and os.access(p, os.X_OK)):
            raise UsageError(f"--server {explicit} is not an executable file", hint="pass the llama-server binary")
        return p
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "homespec" / "llama-tools"
    # a build whose smoke test passed first; one that crashed (its AMX kernels, on some Xeons) never
    found = [p for p in sorted(cache.glob(f"llama-{VERSION}-*/bin/llama-server")) if _smoke(p) != "failed"]
    if not found:
        raise UsageError("llama-server is not built", hint="run `bash scripts/build_llamacpp_tools.sh`, or pass --server BIN")
    # a passing build first; among those one with homespec's patch (its folder ends -p<patch hash>),
    # which runs EAGLE-3.1 GGUFs too, before an older one without it
    return min(found, key=lambda p: (_smoke(p) != "pass", "-p" not in p.parent.parent.name))


def _smoke(server: Path) -> str:
    """pass, failed, or unknown: the verdict scripts/build_llamacpp_tools.sh wrote beside the binary."""
    try:
        word = (server.parent / "SMOKE").read_text().split()[0]
    except (OSError, IndexError):
        return "unknown"
    return "pass" if word == "pass" else "failed"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One llama-server on 127.0.0.1, started with `args`, stopped on exit."""

    def __init__(self, binary: Path, model: str, args: list[str], ctx: int, threads: int, log: Path):
        self.port = _free_port()
        cmd = [str(binary), "-m", model, "--host", "127.0.0.1", "--port", str(self.port), "-c", str(ctx),
               "-t", str(threads), "-tb", str(threads), "-np", "1", "--no-webui", *args]
        self.log = log.open("w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 300
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise HomespecError(f"llama-server exited ({self.proc.returncode})", hint=f"see its log: {log}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        raise HomespecError("llama-server did not come up in 300 s", hint=f"see its log: {log}")

    def complete(self, ids: list[int], n: int) -> dict[str, Any]:
        body = {"prompt": ids, "n_predict": n, "temperature": 0.0, "cache_prompt": False, "return_tokens": True,
                "stream": False}
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/completion", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            return json.loads(r.read())

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def server_figures(responses: list[dict[str, Any]]) -> dict[str, Any]:
    """Totals over a method's responses, from llama-server's own `timings`."""
    n = sum(r["timings"]["predicted_n"] for r in responses)
    ms = sum(r["timings"]["predicted_ms"] for r in responses)
    drafted = sum(r["timings"].get("draft_n", 0) for r in responses)
    accepted = sum(r["timings"].get("draft_n_accepted", 0) for r in responses)
    passes = n - accepted  # each verification emits its accepted drafts plus one target token
    return {"tokens": n, "decode_s": ms / 1000, "tokens_per_s": n / (ms / 1000) if ms else 0.0,
            "tokens_per_pass": n / passes if passes else None, "passes": passes, "draft_n": drafted, "draft_n_accepted": accepted,
            "outputs": [r.get("tokens", []) for r in responses]}


def run_server(binary: Path, model: str, prompts: list[list[int]], n: int, args: list[str], ctx: int,
               threads: int, log: Path) -> dict[str, Any]:
    with Server(binary, model, args, ctx, threads, log) as srv:
        srv.complete(prompts[0], 8)  # warm-up: first-call costs out of the figures
        return server_figures([srv.complete(p, n) for p in prompts])


def identical(a: list[list[int]], b: list[list[int]]) -> float:
    """Fraction of prompts whose greedy answers match over the shorter of the two (EOS handling aside)."""
    same = sum(1 for x, y in zip(a, b) if x[:min(len(x), len(y))] == y[:min(len(x), len(y))])
    return same / len(b) if b else 0.0


def table(rows: dict[str, dict[str, Any]]) -> str:
    base = rows["llama-server plain"]["tokens_per_s"]
    lines = ["| method | tokens/s | vs llama-server plain | tokens per target pass | greedy = llama-server plain |",
             "|---|---:|---:|---:|---:|"]
    for name, r in rows.items():
        tpp = "" if r["tokens_per_pass"] is None else f"{r['tokens_per_pass']:.2f}"
        lines.append(f"| {name} | {r['tokens_per_s']:.1f} | {r['tokens_per_s'] / base:.2f}x | {tpp} | "
                     f"{r['identical_to_llama_server_plain']:.0%} |")
    return "\n".join(lines) + "\n"


def homespec_row(stats: Any) -> dict[str, Any]:
    """A homespec bench method's figures in the same terms (homespec.bench.run.MethodStats)."""
    return {"tokens": stats.tokens, "decode_s": stats.decode_s, "tokens_per_s": stats.tokens_per_s,
            "tokens_per_pass": stats.tokens / stats.passes if stats.passes else None, "passes": stats.passes,
            "outputs": [list(o) for o in stats.outputs]}


def against(result: Any, prompts: list[list[int]], *, server: Path, draft_gguf: str | None, n_max: int,
            max_tokens: int, ctx: int, threads: int, log_dir: Path) -> dict[str, dict[str, Any]]:
    """llama-server plain (and with its eagle3 drafter on `draft_gguf`) on `prompts`, beside the methods of a
    homespec bench `result` on the same prompts; every row with its greedy agreement with llama-server plain."""
    model = result.model
    rows = {"llama-server plain": run_server(server, model, prompts, max_tokens, [], ctx, threads,
                                             log_dir / "llama-server-plain.log")}
    if draft_gguf:
        spec = ["--spec-type", "draft-eagle3", "--spec-draft-model", draft_gguf, "--spec-draft-n-max", str(n_max),
                "--spec-draft-p-min", "0"]
        rows["llama-server eagle3"] = run_server(server, model, prompts, max_tokens, spec, ctx, threads,
                                                 log_dir / "llama-server-eagle3.log")
    for name, stats in result.methods.items():
        rows[f"homespec {name}"] = homespec_row(stats)
    ref = rows["llama-server plain"]["outputs"]
    for r in rows.values():
        r["identical_to_llama_server_plain"] = identical(r["outputs"], ref)
    return rows


def as_json(rows: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The rows without their token lists, ratios to llama-server plain added."""
    base = rows["llama-server plain"]["tokens_per_s"] or 1.0
    return {name: {**{k: v for k, v in r.items() if k != "outputs"}, "ratio_vs_llama_server_plain": r["tokens_per_s"] / base}
            for name, r in rows.items()}
