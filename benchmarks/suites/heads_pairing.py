"""Measure run-time head pairing as a user meets it (docs/results/2026-12-06/heads-pairing/):

1. `generate --draft eagle3-llama3.1-8b` on the embedded model: refused in one line, exit 2, timed, and
   whether llama.cpp was ever imported (it is not: no weights, not even a vocabulary, load);
2. `generate` on a model with Llama-3.1-8B's identity (random Q4_0 weights, narrow: tests/shaped_models.py)
   with an empty Hugging Face cache: the one-line note naming `homespec pull`, and the run going on;
3. `homespec pull` of a head from a Hugging Face hub on 127.0.0.1 (tests/hub_server.py) stopped by Ctrl-C
   mid-file, then run again: what the second run asked for (the HTTP Range) and sent.

    python -m benchmarks heads_pairing > docs/results/2026-12-06/heads-pairing/run.md

The report is Markdown on stdout; the results file keeps the same text under detail.markdown.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import ROOT, use_tests
from benchmarks.results import Result

use_tests()
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _run(argv: list[str], env: dict, timeout: int = 900) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.perf_counter()
    r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)
    return r, time.perf_counter() - t0


def refusal() -> None:
    code = ("import sys; from homespec.cli import main; rc = main(['generate', '--draft', 'eagle3-llama3.1-8b', "
            "'-p', 'hi', '-n', '4']); print('llama_cpp imported:', 'llama_cpp' in sys.modules); sys.exit(rc)")
    times = []
    for _ in range(3):
        r, dt = _run([sys.executable, "-c", code], ENV)
        times.append(dt)
    print("## 1. A head for another model, refused before anything loads\n")
    print("```\n$ homespec generate --draft eagle3-llama3.1-8b -p hi -n 4   # the embedded SmolLM2-135M")
    print(r.stderr.rstrip())
    print(f"(exit {r.returncode}; {r.stdout.strip()})\n```\n")
    print(f"Wall time of the whole command, 3 runs: {', '.join(f'{t:.2f} s' for t in times)} "
          "(Python start, homespec's imports, the catalogue and one GGUF header; llama.cpp is never imported).\n")


def fetch_note(tmp: Path) -> None:
    from shaped_models import shaped_gguf

    model = shaped_gguf(tmp / "Meta-Llama-3.1-8B-Instruct-Q4_0.gguf", name="Meta Llama 3.1 8B Instruct",
                        n_layer=32, n_embd=4096, n_vocab=128256, fill="random")
    env = {**ENV, "HF_HUB_CACHE": str(tmp / "empty-hub")}
    argv = [sys.executable, "-m", "homespec", "generate", "--model", str(model), "--no-chat", "-n", "16",
            "-p", "the cat sat on the mat. the cat sat on the mat."]
    r, dt = _run(argv, env)
    print("## 2. A model whose catalogue head is not on this machine\n")
    print("A GGUF with Llama-3.1-8B-Instruct's identity (llama, 32 layers of 4096, 128,256 tokens, named \"Meta Llama "
          "3.1 8B Instruct\"; one narrow attention head, FFN 64, random Q4_0 weights: tests/shaped_models.py), an empty "
          "Hugging Face cache:\n")
    print(f"```\n$ homespec generate --model {model.name} --no-chat -n 16 -p \"the cat sat on the mat. the cat sat on the mat.\"")
    print(r.stderr.rstrip())
    print(f"(exit {r.returncode}, {dt:.1f} s; the text is the random model's padding tokens)\n```\n")
    r, _ = _run([*argv[:-2], "-p", "hi", "--draft", "redhat-eagle3-llama3.1-8b", "--json"], env)
    print("The same model with a catalogue id given by hand:\n")
    print("```\n$ homespec generate --model ... --draft redhat-eagle3-llama3.1-8b ...")
    print("\n".join(line for line in r.stderr.splitlines() if line.startswith("note:")))
    print(f"(exit {r.returncode})\n```\n")


def pull_resume(tmp: Path) -> None:
    from hub_server import Hub, Repo, start
    from published_heads import published, reduced, write_head

    head = write_head(tmp / "served", reduced(published("redhat-qwen3-8b")))
    repo = "RedHatAI/Qwen3-8B-speculator.eagle3"
    hub = Hub(repos={repo: Repo({"config.json": head / "config.json", "model.safetensors": head / "model.safetensors"})})
    httpd = start(hub)
    env = {**ENV, "HF_ENDPOINT": hub.url, "HF_HUB_CACHE": str(tmp / "hub"), "HF_HUB_DOWNLOAD_TIMEOUT": "300"}
    served = head / "model.safetensors"
    partial = (tmp / "hub" / f"models--{repo.replace('/', '--')}" / "blobs" /
               f"{hashlib.sha256(served.read_bytes()).hexdigest()}.incomplete")
    hub.stall_once.add("model.safetensors")
    argv = [sys.executable, "-m", "homespec", "pull", "redhat-eagle3-qwen3-8b"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    while not (partial.exists() and partial.stat().st_size > 0 and any(h.sent for h in hub.log if h.method == "GET")):
        time.sleep(0.1)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    hub.release.set()
    kept = partial.stat().st_size
    hub.log.clear()
    r, dt = _run(argv, env)
    gets = [h for h in hub.log if h.method == "GET" and h.path.endswith("model.safetensors")]
    print("## 3. `homespec pull`, stopped by Ctrl-C and run again\n")
    print(f"A head (the reduced-width Qwen3-8B speculators head of tests/data/heads, {served.stat().st_size:,} bytes of "
          "weights) served by the local hub; SIGINT while model.safetensors arrives:\n")
    print(f"```\n$ homespec pull redhat-eagle3-qwen3-8b   # interrupted\n{err.strip().splitlines()[-1]}\n"
          f"(exit {proc.returncode}; {kept:,} bytes kept in blobs/….incomplete)\n")
    print(f"$ homespec pull redhat-eagle3-qwen3-8b   # again, {dt:.1f} s")
    print(r.stdout.rstrip())
    print(f"(exit {r.returncode}; the hub was asked for Range {gets[0].range if gets else None} and sent "
          f"{sum(h.sent for h in gets):,} bytes = {served.stat().st_size:,} - {kept:,})\n```\n")
    httpd.shutdown()


def add_arguments(ap: argparse.ArgumentParser) -> None:
    pass  # the common flags alone


def run(a: argparse.Namespace) -> Result:
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        print("# Heads pair with their targets at run time\n")
        print(f"Measured with `python -m benchmarks heads_pairing` on this machine ({os.cpu_count()} CPUs).\n")
        refusal()
        with tempfile.TemporaryDirectory() as d:
            fetch_note(Path(d))
            pull_resume(Path(d))
    print(text.getvalue(), end="")
    return Result(detail={"markdown": text.getvalue()})
