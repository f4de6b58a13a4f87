"""The guard: each step, the draft depth every decoding sequence gets (0 = plain), from what the
passes just run cost and what drafts were accepted. One sequence is a batch of one: chat,
generate, bench and serve all decode under this guard (homespec.engine.step).

A draft token's price depends on the batch it joins. On a GPU a decode of 8 rows costs about
what one row costs (memory-bound), so drafting is nearly free; on a CPU every row costs almost
a whole forward (compute-bound), and 8 sequences each verifying a chain of 4 cost ~5x a plain
step of the same 8. So the guard keeps a cost table by batch rows, measured online from every
llama_decode the engine runs (prefill chunks included, which measure large batches for free),
and predicts a row count it has not run by interpolating between the measured row counts on
either side. For a step of n decoding sequences (plus the rows of prefill chunks riding along, which
every choice pays alike) depth d is worth

    tokens(d) / seconds(d) = n (1 + sum_{j<=d} alpha_j) / (cost(n.nodes(d) + extra) + n.d.draft_level)

and the guard picks the best d, d > 0 only when it beats plain (d = 0) by `margin`. A
speculative step is then judged on what it emitted: one that loses to plain decoding starts a
backoff of plain steps (16, doubling while losses repeat, up to 256; and at least as many as
make the time it lost `margin` of theirs), so timing noise in the table cannot keep speculation
on, and probing costs about `margin` of the time at most. alpha_j,
the chance a draft accepts at least j tokens, starts from the head's recorded acceptance
(homespec.plan.acceptance: its acceptance.json, weighted as `prior_weight` steps) and follows
what this engine's drafts accept; draft_level is the measured drafting time per level and
sequence.

Where a lane's drafters offer more than one candidate (`--method auto`: prompt lookup, the suffix
store and the EAGLE head; or a lookup alone), `choose_lanes` prices each lane's candidates with
the same cost table and picks per lane (homespec.speculative.choice); a lookup's chain is priced by
its own statistics by match length (`copies`), the head's tree by alpha and draft_level above.
Before the lookups search at all, `match_floor` reads off the same prices the shortest match whose
chain could pay: the lookups search only for matches that long, and not at all where no chain
could pay (homespec.engine.step).
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from homespec.contracts.drafter import Offer
from homespec.speculative.choice import BUCKETS, PLAIN, Choice, CopyStats, choose_each, forced

SAMPLES = 5  # passes per row count whose median is its cost: one outlier moves nothing
REFRESH = 128  # passes after which the plain step's own row count is measured again
RECHECK = 16  # passes after which the shortest match worth a search (match_floor) is read again
UNSEEN_DECAY = 0.7  # acceptance assumed one depth beyond the last known, relative to it
NO_PRIOR = 0.5  # P(accepted >= 1) assumed for a model drafter with no recorded acceptance (a draft model)


@dataclass
class BatchGuard:
    depth: int  # the deepest draft (the drafter's depth as loaded)
    nodes_per_level: float = 1.0  # tree nodes a level adds (1 for a chain)
    prior: Sequence[float] | None = None  # recorded P(accepted >= d), d = 1, 2, ...
    forced: bool = False  # no guard: every sequence drafts at full depth
    margin: float = 0.03
    prior_weight: float = 8.0
    alpha_ewma: float = 0.3
    costs: dict[int, float] = field(default_factory=dict)  # batch rows -> seconds per llama_decode (median)
    tried: list[float] = field(default_factory=list)  # [d-1]: drafts that reached depth d
    hits: list[float] = field(default_factory=list)  # [d-1]: ... and accepted at least d tokens
    draft_level_s: float = 0.0  # drafting time per level and sequence
    chosen: int = 0  # the depth chosen for the last step
    predicted: float | None = None  # the last predicted (best / plain) tokens-per-second ratio
    backoff: int = 16  # plain steps after a speculative step that lost (doubles per loss in a row)
    max_backoff: int = 256
    losses: int = 0  # speculative steps that emitted fewer tokens per second than plain would have
    wins: int = 0
    spec_steps: int = 0  # sequence-steps that verified a draft
    plain_steps: int = 0  # sequence-steps decoded plainly (the first token of an answer not counted)
    unsearched: int = 0  # sequence-steps whose lookups did not search: no chain could pay (match_floor)
    copies: CopyStats = field(default_factory=CopyStats)  # known chains' acceptance by source and match length
    # per drafter: [sequence-steps it drafted, tokens drafted, tokens accepted]
    by_source: dict[str, list[int]] = field(default_factory=dict)
    _plain_left: int = 0
    _backoff_now: int = 0
    _samples: dict[int, deque] = field(default_factory=dict)  # rows -> the latest SAMPLES seconds
    _when: dict[int, int] = field(default_factory=dict)  # rows -> the pass that last measured them
    _passes: int = 0
    _floors: dict[tuple, tuple[int, int]] = field(default_factory=dict)  # (n, extra, reaches) -> (pass, floor)
    _asleep: dict[tuple[int, int], int] = field(default_factory=dict)  # (n, extra) -> pass no depth paid
    _table: tuple[int, list] = (-1, [])  # (the pass it was read at, table())

    # --- deciding ------------------------------------------------------------------------------

    def choose(self, n: int, extra_rows: int = 0) -> int:
        """The draft depth for each of `n` decoding sequences this step (0: plain)."""
        if n == 0 or self.depth < 1:
            return 0
        if self.forced:
            self.chosen = self.depth
            return self.depth
        if len(self.costs) < 2 or self._plain_left > 0 or self.stale(n, extra_rows):
            # too little to read a cost between, backing off, or plain decoding's own cost is old
            self._plain_left = max(0, self._plain_left - 1)
            self.chosen = 0
            return 0
        slept = self._asleep.get((n, extra_rows))
        if slept is not None and self._passes - slept < RECHECK:  # no depth paid a moment ago
            self.chosen = 0
            return 0
        table = self.table()  # once per choice, not once per depth tried
        plain = n / self.cost(n + extra_rows, table)
        best, best_rate = 1, 0.0
        for d in range(1, self.depth + 1):
            rows = n * self.nodes(d) + extra_rows
            rate = n * self.tokens(d) / (self.cost(rows, table) + n * d * self.draft_level_s)
            if rate > best_rate:
                best, best_rate = d, rate
        self.predicted = best_rate / plain  # the best draft depth's tokens/s over plain decoding's
        self.chosen = best if best_rate >= plain * (1 + self.margin) else 0
        if self.chosen:
            self._asleep.pop((n, extra_rows), None)
        else:  # the verdict stands RECHECK passes, or until a draft or a new row count is learnt
            self._asleep[(n, extra_rows)] = self._passes
        return self.chosen

    def choose_lanes(self, offers: Sequence[Sequence[Offer]], extra_rows: int = 0) -> list[Choice]:
        """Each decoding lane's draft this step, from what its drafters offer (no offers: plain).
        Only model drafters on offer: the common depth of `choose`; a known chain on offer: the
        per-lane choice of homespec.speculative.choice; forced (no guard): every lane's longest chain,
        else its model at full depth."""
        n = len(offers)
        if self.forced:
            self.chosen = self.depth
            return [forced(lane, self.depth) for lane in offers]
        if not any(o.known for lane in offers for o in lane):
            depth = self.choose(n, extra_rows) if any(offers) else 0
            return [Choice(lane[0], depth) if lane and depth else PLAIN for lane in offers]
        if len(self.costs) < 2 or self.stale(n, extra_rows):  # too little measured, or plain's cost is old
            self._plain_left = max(0, self._plain_left - 1)
            return [PLAIN] * n
        out = choose_each(self, offers, extra_rows)
        self._plain_left = max(0, self._plain_left - 1)
        self.chosen = max((c.depth or 0 for c in out), default=0)
        return out

    def match_floor(self, n: int, extra_rows: int, reaches: Mapping[str, int]) -> int:
        """The shortest match whose chain could pay this step (0: no chain could; the lookups do
        not search). `reaches`: each lookup's source and longest chain. For each match-length
        bucket, shortest first, a chain of that source and bucket cut to k = 1 .. reach tokens is
        worth (n - 1 + tokens(k)) / cost(n + k + extra) by its acceptance so far (`copies`, as
        the choice prices it); the first bucket where some cut beats plain decoding by the margin
        is the floor. One lane: exactly the chains the choice could take; several: the margin is
        dropped, since a chain the lane would not take alone may ride beside another's. The
        verdict stands for RECHECK passes, or until a chain's acceptance is learnt or a row count
        is first measured."""
        if self.forced:
            return 1
        if not reaches or n < 1:
            return 0
        if len(self.costs) < 2:
            return 1  # too little measured: let the lookups offer (the choice stays plain anyway)
        key = (n, extra_rows, tuple(sorted(reaches.items())))
        kept = self._floors.get(key)
        if kept is not None and self._passes - kept[0] < RECHECK:
            return kept[1]
        table = self.table()
        bar = n / self.cost(n + extra_rows, table) * (1 + (self.margin if n == 1 else 0.0))
        worth = [bar * self.cost(n + k + extra_rows, table) - (n - 1) for k in range(1, max(reaches.values()) + 1)]
        floor = next((b for b in BUCKETS if any(self._pays(source, b, reach, worth) for source, reach in reaches.items())), 0)
        if len(self._floors) > 64:
            self._floors.clear()
        self._floors[key] = (self._passes, floor)
        return floor

    def _forget_verdicts(self) -> None:
        self._floors.clear()
        self._asleep.clear()

    def _pays(self, source: str, bucket: int, reach: int, worth: list[float]) -> bool:
        """Does a chain of `source` from a `bucket`-long match, cut somewhere in 1 .. reach, expect
        more tokens than `worth[k - 1]` (what k drafted rows must earn to beat plain)?"""
        gains = self.copies.tokens(source, bucket, reach)
        return any(gains[k] >= worth[k - 1] for k in range(1, reach + 1))

    def skip(self) -> None:
        """A step decoded plainly without asking the drafters (nothing on offer could pay, or
        only a model drafter is left and the backoff holds it): the backoff counts it."""
        self._plain_left = max(0, self._plain_left - 1)
        self.chosen = 0

    @property
    def plain_left(self) -> int:
        """Steps of the backoff still to run plainly (model drafts only wait them out)."""
        return self._plain_left

    def nodes(self, d: int) -> int:
        """Rows of a depth-d draft, the root included."""
        return 1 + max(d, round(self.nodes_per_level * d))

    def tokens(self, d: int) -> float:
        """Expected tokens a depth-d step emits: the target's own plus the accepted drafts."""
        return 1.0 + sum(self.alpha(j) for j in range(1, d + 1))

    def alpha(self, d: int) -> float:
        """P(accepted >= d): the recorded prior blended with this engine's own drafts."""
        p = list(self.prior or ())
        if d <= len(p):
            prior = float(p[d - 1])
        elif p:
            prior = float(p[-1]) * UNSEEN_DECAY ** (d - len(p))
        else:
            prior = NO_PRIOR * UNSEEN_DECAY ** (d - 1)
        tried = self.tried[d - 1] if d <= len(self.tried) else 0.0
        hits = self.hits[d - 1] if d <= len(self.hits) else 0.0
        return (hits + self.prior_weight * prior) / (tried + self.prior_weight)

    def cost(self, rows: int, table: list[tuple[int, float]] | None = None) -> float:
        """Seconds of a llama_decode of `rows` rows, read off `table()` (pass it when asking several
        times in a row): measured, else between the measured row counts on either side (beyond
        the table: its nearest segment, continued)."""
        return max(1e-6, _interpolate(table if table is not None else self.table(), rows))

    def table(self) -> list[tuple[int, float]]:
        """The measured costs by rows, sorted, each no dearer than any larger row count's: a pass
        of more rows does at least the same work, so a count that looks dearer than a larger one
        was measured in a slow moment. Without this, one slow 1-row pass priced plain decoding
        above every draft, speculation then ran every step, and no 1-row pass ever corrected it."""
        if self._table[0] == self._passes and self._table[1]:
            return self._table[1]  # read once per pass: costs change only through record_pass
        out, low = [], math.inf
        for rows, t in sorted(self.costs.items(), reverse=True):
            low = min(low, t)
            out.append((rows, low))
        self._table = (self._passes, out[::-1])
        return self._table[1]

    def stale(self, n: int, extra_rows: int = 0) -> bool:
        """Is plain decoding's own row count (n sequences, no prompt chunks riding along) unmeasured
        or last measured more than REFRESH passes ago? Then this step runs plainly and measures
        it: what every choice is compared with must not go stale while drafts run every step."""
        if extra_rows or self.forced:
            return False
        return self._passes - self._when.get(n, -REFRESH - 1) > REFRESH

    # --- learning ------------------------------------------------------------------------------

    def record_pass(self, rows: int, seconds: float) -> None:
        """One llama_decode of `rows` rows took `seconds`."""
        if rows < 1 or seconds <= 0:
            return
        self._passes += 1
        self._when[rows] = self._passes
        if rows not in self.costs:
            self._forget_verdicts()  # a row count measured the first time: read them again
        kept = self._samples.setdefault(rows, deque(maxlen=SAMPLES))
        kept.append(seconds)
        self.costs[rows] = statistics.median(kept)  # a pass slowed by the machine's other work moves nothing
        if len(self.costs) > 256:  # keep the table bounded: drop the row count furthest from this one
            far = max(self.costs, key=lambda r: abs(r - rows))
            for d in (self.costs, self._samples, self._when):
                d.pop(far, None)

    def record_step(self, n: int, extra_rows: int, tokens: int, seconds: float) -> None:
        """A speculative step of `n` decoding sequences emitted `tokens` in `seconds` (the pass and
        the drafts). Worse than plain decoding (n tokens in cost(n + extra)) by the margin: the
        next `backoff` steps run plain (doubling while losses repeat, and at least enough that
        the time lost is `margin` of theirs), so a prediction that timing noise made too hopeful
        costs a step now and then, not every step, nor more than about `margin` of the time."""
        if self.forced or n < 1 or seconds <= 0:
            return
        t_plain = self.cost(n + extra_rows)
        plain = n / t_plain
        if tokens / seconds < plain * (1 - self.margin):
            self.losses += 1
            doubled = self._backoff_now * 2 if self._backoff_now else self.backoff
            # enough plain steps that this loss is at most `margin` of the time they take: a step
            # that took three plain steps' time to emit 1.4 steps' tokens needs ~54, not 16
            lost = seconds - tokens / plain
            needed = math.ceil(lost / (self.margin * t_plain))
            self._backoff_now = min(self.max_backoff, max(doubled, needed))
            self._plain_left = self._backoff_now
        else:
            self.wins += 1
            self._backoff_now = 0

    def record_draft(self, drafted: int, accepted: int, levels: int, seconds: float) -> None:
        """A sequence drafted `drafted` tokens over `levels` levels in `seconds`; `accepted` were kept."""
        if drafted < 1:
            return
        depth = max(1, levels)
        while len(self.tried) < depth:
            self.tried.append(0.0)
            self.hits.append(0.0)
        for d in range(1, depth + 1):
            self.tried[d - 1] += 1
            self.hits[d - 1] += accepted >= d
        self._asleep.clear()  # the head's worth changed: price it again
        per_level = seconds / depth
        self.draft_level_s = per_level if not self.draft_level_s else (
            (1 - self.alpha_ewma) * self.draft_level_s + self.alpha_ewma * per_level)

    def record_copy(self, source: str, key: int, drafted: int, accepted: int) -> None:
        """A known chain of `drafted` tokens from a match of `key` tokens had `accepted` kept."""
        if drafted >= 1:
            self.copies.record(source, key, drafted, accepted)
            self._floors.clear()  # the chains' worth changed: read the floor again

    def count(self, verified: Sequence) -> None:
        """Tally a pass's verification steps (not its prefills' first tokens): speculative or
        plain, and per drafter what it drafted and what was accepted."""
        for st in verified:
            if st.speculative and st.draft_size > 0:
                self.spec_steps += 1
                mine = self.by_source.setdefault(st.drafter or "?", [0, 0, 0])
                mine[0] += 1
                mine[1] += st.draft_size
                mine[2] += st.accepted
            else:
                self.plain_steps += 1

    def summary(self) -> str:
        """One line for generate's and chat's readouts."""
        out = (f"guard: {self.spec_steps} speculative / {self.plain_steps} plain steps, "
               f"{self.losses} fallbacks")
        if self.predicted is not None and not self.spec_steps:
            out += f" (predicted {self.predicted:.2f}x plain)"
        if self.by_source:
            out += "; accepted / drafted by drafter: " + ", ".join(
                f"{name} {v[2]}/{v[1]}" for name, v in sorted(self.by_source.items()))
        return out

    def as_json(self) -> dict:
        return {"speculative_steps": self.spec_steps, "plain_steps": self.plain_steps, "fallbacks": self.losses,
                "forced": self.forced, "depth": self.depth, "chosen": self.chosen,
                "speculative_steps_won": self.wins, "steps_without_lookup": self.unsearched, "speculative_steps_lost": self.losses,
                "predicted_speedup": None if self.predicted is None else round(self.predicted, 4),
                "draft_level_ms": round(self.draft_level_s * 1e3, 3),
                "alpha": [round(self.alpha(d), 3) for d in range(1, self.depth + 1)],
                "drafters": {name: {"steps": v[0], "drafted": v[1], "accepted": v[2]}
                             for name, v in sorted(self.by_source.items())},
                "copies": self.copies.as_json(),
                "costs_ms": {r: round(s * 1e3, 3) for r, s in sorted(self.costs.items())[:64]}}


def _interpolate(points: list[tuple[int, float]], rows: int) -> float:
    """Piecewise-linear t(rows) through the measured (rows, t) points, sorted by rows. One point:
    through the origin. A global line would not do: a CPU's cost per row falls from one row to
    a prompt chunk, a GPU's is flat and then rises, and a line through both ends misprices the
    few rows a draft adds to a decoding batch, which is the only question asked of it."""
    if len(points) == 1:
        n, t = points[0]
        return t * rows / n
    j = min(max(bisect.bisect_left(points, (rows,)) - 1, 0), len(points) - 2)  # (rows,) sorts before (rows, t)
    (n0, t0), (n1, t1) = points[j], points[j + 1]
    slope = max(0.0, (t1 - t0) / (n1 - n0))
    return t0 + slope * (rows - n0)
