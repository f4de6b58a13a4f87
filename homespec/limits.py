"""The range of every number a user can type: finite, bounded below and above.

One table, read by the command line (homespec.cli.options parses each option through its Range,
so a bad value is a usage error before anything loads) and by the server (homespec.server.schemas
gives pydantic the same bounds), so `--temperature 3` and `"temperature": 3` are refused alike.
The math behind each range is total over it: a temperature too small for float32 to divide by
is greedy, a top-p that keeps nothing keeps the most likely token (homespec.speculative.sampling).

Ground floor: imports nothing of homespec but its errors.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from homespec.errors import UsageError

MAX_CTX = 1 << 24  # 16M tokens (also --ctx's bound in homespec.plan.settings): beyond any trained context
# A token spells at most this many characters in any vocabulary homespec reads (the longest real ones
# are runs of spaces or '=' of a few dozen): a text of more than n * MAX_TOKEN_CHARS characters is
# more than n tokens, known without tokenizing it (a tokenizer given 60 MB of text allocates GBs).
MAX_TOKEN_CHARS = 1024
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class Range:
    """[lo, hi] (lo excluded when `lo_open`), of ints when `integer`; `example`: a value that works."""

    name: str  # the option's flag, or the field's name for the server
    lo: float
    hi: float
    example: str
    integer: bool = False
    lo_open: bool = False

    def problem(self, value: object) -> str | None:
        """Why `value` is outside the range (None when it is inside)."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"{value!r} is not a number"
        if self.integer and not isinstance(value, int):
            return f"{value!r} is not a whole number"
        if isinstance(value, float) and not math.isfinite(value):
            return f"{value} is not a finite number"
        if value < self.lo or (self.lo_open and value == self.lo) or value > self.hi:
            return f"{value:g} is outside {self.describe()}" if isinstance(value, float) else \
                f"{value} is outside {self.describe()}"
        return None

    def describe(self) -> str:
        lo, hi = (_show(self.lo), _show(self.hi))
        return f"{'(' if self.lo_open else '['}{lo}, {hi}]"

    def check(self, value, flag: str | None = None):
        """`value` unchanged when inside the range, else a UsageError naming the flag."""
        why = self.problem(value)
        if why is not None:
            raise UsageError(f"{flag or self.name} {value}: {why}", hint=f"use {flag or self.name} {self.example}")
        return value

    def parse(self, text: str | int | float):
        """A command-line word (or a default, already a number) -> the checked number (ValueError
        with the reason otherwise)."""
        if isinstance(text, str):
            try:
                value = int(text.strip()) if self.integer else float(text.strip())
            except ValueError:
                raise ValueError(f"{text!r} is not {'a whole number' if self.integer else 'a number'}") from None
        else:
            value = float(text) if not self.integer and isinstance(text, int) else text
        why = self.problem(value)
        if why is not None:
            raise ValueError(why)
        return value


def _show(x: float) -> str:
    if x in (INT64_MIN, INT64_MAX):
        return "-2**63" if x < 0 else "2**63-1"
    return f"{x:g}" if isinstance(x, float) else str(x)


# --- sampling (CLI: generate, chat, bench; server: both completion routes) ---------------------
TEMPERATURE = Range("--temperature", 0.0, 2.0, "0.7 (0 = greedy)")  # OpenAI's range
TOP_P = Range("--top-p", 0.0, 1.0, "0.9 (1 = off)", lo_open=True)
TOP_K = Range("--top-k", 0, 1 << 31, "40 (0 = off)", integer=True)
SEED = Range("--seed", INT64_MIN, INT64_MAX, "0", integer=True)  # OpenAI's (a signed 64-bit integer)
MAX_TOKENS = Range("--max-tokens", 1, MAX_CTX, "256", integer=True)
# --- the machine -------------------------------------------------------------------------------
THREADS = Range("--threads", 1, 1 << 16, "4", integer=True)  # then capped at the CPUs there are
# --- the server --------------------------------------------------------------------------------
PORT = Range("--port", 0, 65535, "8080 (0: any free port)", integer=True)
PARALLEL = Range("--parallel", 1, 256, "4", integer=True)  # the planner's bound (homespec.plan.settings)
QUEUE = Range("--queue", 1, 1 << 16, "32", integer=True)
MAX_BODY_MIB = Range("--max-body-mib", 1, 1024, "8", integer=True)
CACHE_RAM_MIB = Range("--cache-ram", 0, 1 << 20, "4096 (0 = off)", integer=True)  # up to 1 TiB of host RAM  # a 16M-token prompt is ~64 MiB of text
# --- the run's and the plan's shape (generate, chat, bench, serve, plan, models) ------------------
CTX = Range("--ctx", 16, MAX_CTX, "4096", integer=True)
DRAFT_DEPTH = Range("--draft-depth", 1, 64, "4", integer=True)  # EAGLE's trees are 5-8 deep
DRAFT_TOPK = Range("--draft-topk", 1, 64, "1 (a chain)", integer=True)
DRAFT_TOKENS = Range("--draft-tokens", 2, 4096, "5 (the root and 4 drafted tokens)", integer=True)
WINDOW = Range("--window", 0, MAX_CTX, "0 (all)", integer=True)
# --- bench -------------------------------------------------------------------------------------
LIMIT = Range("--limit", 1, 1 << 20, "20", integer=True)
REPEAT = Range("--repeat", 1, 100, "3", integer=True)  # rounds per prompt; the median is taken
SERVER_DRAFT_N = Range("--server-draft-n", 1, 64, "4", integer=True)
STORE_RESPONSES = Range("--store-responses", 0, 1 << 20, "256 (0 = off)", integer=True)  # stored Responses API answers
STORE_MIB = Range("--store-mib", 1, 1 << 16, "64", integer=True)  # their bytes, as JSON
# --- draft train -------------------------------------------------------------------------------
HIDDEN_WEIGHT = Range("--hidden-weight", 0.0, 1000.0, "1.0 (0 = off)")
TRAIN_TOKENS = Range("--tokens", 1, 10**10, "500000", integer=True)  # 10B reply tokens: far beyond any run
EPOCHS = Range("--epochs", 1, 1000, "2", integer=True)
DRAFT_VOCAB = Range("--draft-vocab", 2, 1 << 20, "8192", integer=True)  # then at most the target's vocabulary
TTT_STEPS = Range("--ttt-steps", 1, 32, "5", integer=True)  # EAGLE-3 unrolls 7; memory grows with each step
MAX_NEW_TOKENS = Range("--max-new-tokens", 1, 1 << 16, "256", integer=True)
SKIP_SHARDS = Range("--skip-shards", 0, 1 << 20, "96", integer=True)
# --- plan --------------------------------------------------------------------------------------
RAM_GIB = Range("--ram", 0.5, 65536.0, "64")
UBATCH = Range("--ubatch", 1, 65536, "512", integer=True)
N_CPU_MOE = Range("--n-cpu-moe", 0, 4096, "0 (every expert on the GPUs)", integer=True)
GPU_MEMORY_UTILIZATION = Range("--gpu-memory-utilization", 0.0, 1.0, "0.9", lo_open=True)


def surely_longer(text: str, n_tokens: int) -> bool:
    """Whether `text` is more than `n_tokens` tokens in any vocabulary (see MAX_TOKEN_CHARS)."""
    return len(text) > n_tokens * MAX_TOKEN_CHARS


def cpu_count() -> int:
    """CPUs this process may run on (its affinity mask, which a container or taskset narrows)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def cap_threads(n: int, source: str = "--threads") -> tuple[int, str | None]:
    """Threads as asked, at most one per CPU this process may use -> (threads, a note when capped).
    More threads than CPUs only make them wait for each other (and for every other program)."""
    THREADS.check(n, source)
    cpus = cpu_count()
    if n <= cpus:
        return n, None
    return cpus, f"note: {source} {n} is more than the {cpus} CPUs this machine gives homespec; using {cpus}"


def env_threads(env: dict[str, str] | None = None) -> int | None:
    """HOMESPEC_THREADS, checked (None when unset or empty)."""
    raw = (os.environ if env is None else env).get("HOMESPEC_THREADS", "").strip()
    if not raw:
        return None
    try:
        return THREADS.parse(raw)
    except ValueError as e:
        raise UsageError(f"HOMESPEC_THREADS={raw}: {e}",
                         hint="set HOMESPEC_THREADS=4 (say), or unset it to use every physical core") from None
