"""What every suite shares: paths, machine facts, common flags and the side-by-side timing helpers.

Suites compare speeds side by side in one run, never against a figure from another run: a shared machine
drifts more than most of the effects measured (docs/benchmarks.md, "Comparing speeds"). `alternate`
runs each arm once per round, the order reversed every other round, so a drift reaches every arm alike;
`timed_run` times one subprocess from start to exit.
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable, Mapping, TypeVar

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"  # the tiny generated models and the local hub the tests use
RUNS = ROOT / "runs" / "benchmarks"  # default results folder (ignored by git)

T = TypeVar("T")


# --- paths ------------------------------------------------------------------------------------------------

def smollm2() -> Path:
    """The embedded SmolLM2-135M-Instruct GGUF (scripts/setup.sh installs it)."""
    from homespec.embedded import smollm2_path

    return smollm2_path()


def llama_server(explicit: str | None = None) -> Path:
    """The llama-server binary: `explicit`, else the one scripts/build_llamacpp_tools.sh built."""
    from homespec.bench.llamaserver import find_server

    return find_server(explicit)


def use_tests() -> None:
    """Make tests/ importable: the generated tiny models (tiny_families, tiny_models) and the local hub."""
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))


# --- machine facts ----------------------------------------------------------------------------------------

def machine() -> dict[str, Any]:
    """The CPU, its cores and the GPUs, read the way `homespec probe` reads them."""
    from homespec.hardware.cpu import read_host
    from homespec.hardware.nvidia import read_nvml

    try:
        host = read_host()
        cpu, cores = host.cpu_name, host.cpu_cores
    except ImportError:  # no psutil (a machine homespec did not set up): the OS's own figures
        cpu, cores = platform.processor() or platform.machine(), os.cpu_count() or 0
    try:
        gpus = [g.name for g in read_nvml()]
    except Exception:  # no driver or no NVML binding: no NVIDIA GPU to name, not an error
        gpus = []
    return {"cpu": cpu, "cores": cores, "gpu": gpus}


# --- flags ------------------------------------------------------------------------------------------------

def parser(suite: str, doc: str | None) -> argparse.ArgumentParser:
    """A suite's parser with the flags every suite takes; the suite adds its own."""
    first, _, rest = (doc or "").strip().partition("\n\n")
    p = argparse.ArgumentParser(prog=f"python -m benchmarks {suite}", description=" ".join(first.split()) or None,
                                epilog=rest or None, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", type=Path, default=None, metavar="FILE",
                   help=f"write the results here (default: {RUNS.relative_to(ROOT)}/{suite}-<date>.json)")
    p.add_argument("--no-json", action="store_true", help="write no results file")
    return p


def add_model(p: argparse.ArgumentParser, help: str = "a GGUF (default: the embedded SmolLM2)") -> None:
    p.add_argument("--model", default=None, help=help)


def add_rounds(p: argparse.ArgumentParser, default: int = 3) -> None:
    p.add_argument("--rounds", type=int, default=default, help="rounds of the whole measurement")


def add_threads(p: argparse.ArgumentParser, default: int | None = None) -> None:
    p.add_argument("--threads", type=int, default=default, help="CPU threads for llama.cpp")


# --- side-by-side timing ----------------------------------------------------------------------------------

def alternate(arms: Mapping[str, Callable[[], T]], rounds: int) -> dict[str, list[T]]:
    """Each arm once per round, the order reversed every other round -> {arm: [its result per round]}."""
    names = list(arms)
    out: dict[str, list[T]] = {n: [] for n in names}
    for r in range(rounds):
        for n in (names if r % 2 == 0 else names[::-1]):
            out[n].append(arms[n]())
    return out


def timed_run(cmd: list[str], ok: tuple[int, ...] = (0,), **kw: Any) -> float:
    """Seconds from start to exit of `cmd`; an exit status outside `ok` stops the suite."""
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, **kw)
    if r.returncode not in ok:
        raise SystemExit(f"error: {' '.join(map(str, cmd))} exited {r.returncode}: {r.stderr.decode()[-300:]}")
    return time.perf_counter() - t


def median_ratio(a: list[float], b: list[float]) -> float:
    """median(a) / median(b): the side-by-side figure suites report."""
    return statistics.median(a) / statistics.median(b)


# --- servers on 127.0.0.1 -----------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proc:
    """A server subprocess on 127.0.0.1; `url` once it answers GET /health."""

    def __init__(self, name: str, cmd: list[str], port: int, log: Path) -> None:
        self.name, self.port, self.log = name, port, log.open("w")
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)

    def wait_ready(self, timeout_s: float = 300.0) -> "Proc":
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"error: {self.name} exited ({self.proc.returncode}); see {self.log.name}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.5)
        raise SystemExit(f"error: {self.name} did not come up in {timeout_s:.0f} s; see {self.log.name}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def usage_error(message: str, hint: str) -> None:
    """A suite's flags that do not go together: one `error:` and one `hint:` line, exit status 2."""
    print(f"error: {message}\nhint: {hint}", file=sys.stderr)
    raise SystemExit(2)
