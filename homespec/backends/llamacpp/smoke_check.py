"""The parent side of the llama.cpp smoke test: run the child (`python -m
homespec.backends.llamacpp.smoke --child`, started by name: this module imports nothing of the
backend) and read its fate. homespec.backends.llamacpp.smoke is the command and the child;
docs/backends.md, "AMX".
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

PROMPT = "The capital of France is"
EXPECT = "Paris"
N_DECODE = 4
CHILD_TIMEOUT_S = 180.0

EXIT_PASS, EXIT_ERROR, EXIT_CRASH, EXIT_WRONG, EXIT_BROKEN, EXIT_LACKS = 0, 1, 3, 4, 5, 6


@dataclass(frozen=True, slots=True)
class SmokeResult:
    outcome: str  # "pass" | "crash" | "wrong" | "error"
    seconds: float
    text: str = ""  # the greedy continuation the child decoded
    signal: str = ""  # "SIGSEGV" when the child died by a signal
    detail: str = ""  # the child's last error line, or what was wrong
    # after a failure with the extra buffer types: how the same test went without them ("pass"
    # says the AMX / repack buffers are the cause; "crash" or "wrong" says they are not)
    without_extra: str = ""
    # entry points homespec calls that the build does not export (homespec.backends.llamacpp.exports)
    missing: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.outcome == "pass"

    def line(self) -> str:
        """One line for a person: what happened and how long it took."""
        if self.outcome == "pass":
            return f"llama.cpp smoke test passed in {self.seconds:.1f} s (decoded {self.text!r})"
        also = " (and without its AMX / repack buffers too)" if self.without_extra in ("crash", "wrong") else ""
        if self.outcome == "crash":
            return (f"llama.cpp crashed with {self.signal} when it loaded or first decoded a model{also} "
                    f"(smoke test, {self.seconds:.1f} s)")
        if self.outcome == "wrong":
            return f"llama.cpp decoded wrong tokens in the smoke test: {self.text!r} ({self.detail}){also}"
        return f"the llama.cpp smoke test could not run: {self.detail}"

    @property
    def exit_code(self) -> int:
        if self.outcome in ("crash", "wrong") and self.without_extra in ("crash", "wrong"):
            return EXIT_BROKEN
        return {"pass": EXIT_PASS, "crash": EXIT_CRASH, "wrong": EXIT_WRONG}.get(self.outcome, EXIT_ERROR)


# --- the parent ---------------------------------------------------------------------------------


def check_build(*, variant: str = "", env: dict[str, str] | None = None) -> SmokeResult:
    """The smoke test of the build as it is; after a failure, again without the extra buffer
    types, which tells an AMX crash (a build without AMX helps) from any other (it does not)."""
    from dataclasses import replace

    first = run_smoke(extra_bufts=True, variant=variant, env=env)
    if first.outcome not in ("crash", "wrong"):
        return first
    return replace(first, without_extra=run_smoke(extra_bufts=False, variant=variant, env=env).outcome)


def run_smoke(*, extra_bufts: bool = True, variant: str = "", timeout: float = CHILD_TIMEOUT_S,
              env: dict[str, str] | None = None) -> SmokeResult:
    """Run the smoke test in a child process and read its fate. `extra_bufts=True` tests the build
    as it is (AMX / repack buffers where it has them); False, as homespec loads after a crash."""
    child_env = dict(os.environ if env is None else env)
    child_env["HOMESPEC_LLAMA_AMX"] = "on" if extra_bufts else "off"
    child_env["HOMESPEC_SMOKE_VARIANT"] = variant
    child_env.pop("HOMESPEC_DEBUG", None)  # the child's stdout is one JSON line
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "homespec.backends.llamacpp.smoke", "--child"],
                              env=child_env, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return SmokeResult("error", time.perf_counter() - t0, detail=f"the child did not finish in {timeout:.0f} s")
    seconds = time.perf_counter() - t0
    if proc.returncode < 0:
        return SmokeResult("crash", seconds, signal=_signal_name(-proc.returncode), detail=_last_line(proc.stderr))
    report = _report(proc.stdout)
    text = str(report.get("text", ""))
    if proc.returncode == EXIT_PASS:
        return SmokeResult("pass", seconds, text=text, missing=tuple(str(m) for m in report.get("missing") or ()))
    if proc.returncode == EXIT_WRONG:
        return SmokeResult("wrong", seconds, text=text, detail=f"expected {EXPECT!r} in the continuation")
    return SmokeResult("error", seconds, detail=str(report.get("error") or _last_line(proc.stderr) or
                                                    f"exit code {proc.returncode}"))


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def _report(stdout: str) -> dict:
    for line in reversed((stdout or "").splitlines()):
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict):
            return doc
    return {}
