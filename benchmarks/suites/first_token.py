"""Time from starting `homespec generate` / `homespec chat` to its first answer token, for two or more
checkouts side by side, in alternating rounds.

    .venv/bin/python -m benchmarks first_token --checkout before=/path/a --checkout after=/path/b \
        [--commands generate,chat] [--method none] [--rounds 5] [--threads 2]

Each run is a fresh process (`python -m homespec ...` with the checkout as its working directory and
first on PYTHONPATH, so it imports that checkout's homespec with this interpreter's packages) on the
embedded SmolLM2 GGUF; the clock starts just before the process is spawned and stops at the first byte
of the answer on its stdout: `generate` streams the text as it comes, `chat` prints its `>>> ` prompt
and then the answer to the line piped on its stdin. Rounds alternate the checkouts' order, so a drift
in the machine's load falls on both. Beside the wall time it reads the process's CPU time (user +
system, all its threads) at that moment from /proc (Linux): on a shared machine the wall time moves
with the neighbours' load by seconds, the CPU time much less. Also prints how long `import torch` alone takes here, and whether
each run imported torch (HOMESPEC's own code is not asked: a stand-in `sitecustomize` records it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import add_rounds, add_threads
from benchmarks.results import Result

PROMPT = "Name three colours."
# sitecustomize that reports at exit whether torch was imported (it imports nothing itself)
_PROBE = '''import atexit, os, sys
atexit.register(lambda: open(os.environ["HOMESPEC_TORCH_PROBE"], "w").write(str("torch" in sys.modules)))
'''


def first_token_s(checkout: Path, command: str, method: str, threads: int,
                  probe_dir: Path) -> tuple[float, float | None, bool]:
    """Seconds from spawn to the first answer byte on stdout, the process's CPU seconds then, and
    whether the run imported torch."""
    args = {"generate": ["generate", "-p", PROMPT, "-n", "8"],
            "chat": ["chat", "-n", "8"]}[command]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(probe_dir), str(checkout)]),
           "HOMESPEC_TORCH_PROBE": str(probe_dir / "torch.txt"), "HOMESPEC_CHATS_DIR": str(probe_dir / "chats")}
    skip = b">>> " if command == "chat" else b""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "homespec", *args, "--method", method, "--threads", str(threads)],
                            cwd=checkout, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    if command == "chat":
        proc.stdin.write(f"{PROMPT}\n".encode())
    proc.stdin.close()
    seen = b""
    while True:
        chunk = os.read(proc.stdout.fileno(), 1)
        if not chunk:
            raise SystemExit(f"error: {command} in {checkout} ended before answering (exit {proc.wait()})")
        seen += chunk
        if len(seen) > len(skip) and seen.startswith(skip):
            elapsed = time.perf_counter() - t0
            cpu = cpu_s(proc.pid)
            break
    proc.stdout.read()
    if proc.wait() != 0:
        raise SystemExit(f"error: {command} in {checkout} exited {proc.returncode}")
    return elapsed, cpu, (probe_dir / "torch.txt").read_text() == "True"


def cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a running process and its threads (None off Linux)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def torch_import_s() -> float:
    out = subprocess.run([sys.executable, "-c", "import time; t = time.perf_counter(); import torch; "
                          "print(time.perf_counter() - t)"], capture_output=True, text=True, check=True)
    return float(out.stdout)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--checkout", action="append", required=True, help="NAME=DIR (repeat)")
    ap.add_argument("--commands", default="generate,chat")
    ap.add_argument("--method", default="none")
    add_rounds(ap, 5)
    add_threads(ap, 2)


def run(a: argparse.Namespace) -> Result:
    checkouts = dict(c.split("=", 1) for c in a.checkout)
    names = list(checkouts)
    probe_dir = Path(tempfile.mkdtemp(prefix="homespec-ttft-"))
    (probe_dir / "sitecustomize.py").write_text(_PROBE)
    print(f"import torch alone: {torch_import_s():.2f} s", flush=True)
    rows = []
    for r in range(a.rounds):
        order = names if r % 2 == 0 else names[::-1]
        for command in a.commands.split(","):
            for name in order:
                s, cpu, torch = first_token_s(Path(checkouts[name]).resolve(), command, a.method, a.threads, probe_dir)
                rows.append({"round": r + 1, "checkout": name, "command": command, "seconds": round(s, 3),
                             "cpu_seconds": cpu, "torch": torch})
                print(f"round {r + 1} {command:8} {name:10} {s:6.2f} s wall, {cpu:6.2f} s CPU  "
                      f"torch imported: {torch}", flush=True)
    for command in a.commands.split(","):
        for key in ("seconds", "cpu_seconds"):
            med = {n: statistics.median(x[key] for x in rows if x["checkout"] == n and x["command"] == command)
                   for n in names}
            print(f"{command} {'wall' if key == 'seconds' else 'CPU'}: median "
                  + ", ".join(f"{n} {v:.2f} s" for n, v in med.items())
                  + (f"; {names[0]} - {names[1]}: {med[names[0]] - med[names[1]]:+.2f} s" if len(names) == 2 else ""))
    return Result(rows=rows, detail={"method": a.method, "threads": a.threads})

