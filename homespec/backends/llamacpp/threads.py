"""How many threads each llama_decode gets: the fastest count measured, not the most.

llama.cpp's CPU threads meet at a barrier after every graph node (~900 a pass for a 30-layer
model), spinning while they wait. On cores other processes share, one thread that is not running
stalls the others at every barrier: on the project's 2-core CPU at load average 13, SmolLM2 took
815 ms a token with 2 threads and 37 ms with 1, where on idle cores 2 threads are the faster
(docs/server.md, "Threads on a busy CPU"). The count that pays changes with the machine's load,
so it is measured, decode by decode:

* candidates: the configured count (`--threads`) and its halvings down to 1;
* each decode runs on the candidate with the lowest moving average of seconds per row for its kind
  of decode (one row: a plain step; up to 16: a draft tree; more: a prompt chunk);
* every other candidate is tried again once the time spent in decodes of that kind since its last try
  reaches its own last cost over EXPLORE_SHARE, so re-measuring spends about that share of their time
  at most (counted in their own time, not the clock's: a draft head's calls come once a step between
  target passes that take far longer), and a count that has become faster (the load went away) is
  found within MAX_WAIT_S.

One decode's figure moves the average by ALPHA: a switch needs a few slow decodes, not one. A count's
first figure is only a placeholder: the first decode of a shape on a count pays one-time costs
(llama.cpp reserves the graph's buffers), so the second replaces it, and a count is tried twice
before it is judged.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

EXPLORE_SHARE = 0.05  # the most time spent re-measuring counts that are not the best
MAX_WAIT_S = 30.0  # a count is re-measured at least this often
ALPHA = 0.3  # weight of the newest figure in a count's moving average


def candidates(n_threads: int) -> tuple[int, ...]:
    """The configured count and its halvings down to 1: (8, 4, 2, 1), (6, 3, 1), (2, 1)."""
    out = [n_threads]
    while out[-1] > 1:
        out.append(max(1, out[-1] // 2))
    return tuple(out)


def kind(n_rows: int) -> int:
    """Decodes whose per-row cost is alike: 0 one row, 1 a tree (up to 16), 2 a prompt chunk."""
    return 0 if n_rows <= 1 else 1 if n_rows <= 16 else 2


@dataclass
class _Count:
    cost: float | None = None  # moving average of seconds per row
    tried: float = float("-inf")  # when it last ran (time.monotonic())
    spent_at: float = 0.0  # the seconds its kind of decode had taken, all counts together, when it last ran
    runs: int = 0  # the decodes it was measured on


@dataclass
class ThreadTuner:
    """Picks each decode's thread count and learns from its time. `fixed`: always `n_threads`."""

    n_threads: int
    fixed: bool = False
    _counts: dict[tuple[int, int], _Count] = field(default_factory=dict)
    _kinds: dict[int, list[tuple[_Count, int]]] = field(default_factory=dict)
    _spent: dict[int, float] = field(default_factory=dict)  # kind -> seconds its decodes took, all told

    def __post_init__(self) -> None:
        self.options = (self.n_threads,) if self.fixed else candidates(self.n_threads)

    def pick(self, n_rows: int, now: float | None = None, *, calls: int = 1) -> int:
        """The thread count for a decode of `n_rows` rows (`calls` such decodes in one go, as a draft
        tree grown in one llama.cpp call: a count tried again runs all of them)."""
        if len(self.options) == 1:
            return self.options[0]
        k = kind(n_rows)
        stats = self._kinds.get(k)
        if stats is None:  # the kind's counts, looked up once (a head calls this a few times a step)
            stats = self._kinds[k] = [(self._counts.setdefault((k, n), _Count()), n) for n in self.options]
        known = [(s.cost, n) for s, n in stats if s.cost is not None]
        if not known:
            return self.options[0]
        best_cost, best = min(known)
        now = time.monotonic() if now is None else now
        spent = self._spent.get(k, 0.0)
        for s, n in stats:
            if n == best:
                continue
            cost = s.cost if s.cost is not None else best_cost  # never measured: assume it costs the best's
            due = s.runs < 2 or spent - s.spent_at >= cost * max(1, n_rows) * max(1, calls) / EXPLORE_SHARE
            if due or now - s.tried >= MAX_WAIT_S:
                return n
        return best

    def record(self, n_rows: int, n_threads: int, seconds: float, now: float | None = None, *, calls: int = 1) -> None:
        """A decode of `n_rows` rows on `n_threads` threads took `seconds` (`calls` such decodes, all told)."""
        if len(self.options) == 1:
            return
        k = kind(n_rows)
        s = self._counts.setdefault((k, n_threads), _Count())
        per_row = seconds / (max(1, n_rows) * max(1, calls))
        s.cost = per_row if s.runs < 2 else (1 - ALPHA) * s.cost + ALPHA * per_row  # the first figure is replaced
        s.runs += 1
        s.tried = time.monotonic() if now is None else now
        self._spent[k] = s.spent_at = self._spent.get(k, 0.0) + seconds

    def best(self, n_rows: int = 1) -> int | None:
        """The count now believed fastest for decodes of `n_rows` rows (None: none measured)."""
        known = [(c.cost, n) for (k, n), c in self._counts.items() if k == kind(n_rows) and c.cost is not None]
        return min(known)[1] if known else None
