"""The guard's choice among what each lane's drafters offer: prompt lookup's chain, the suffix
store's chain, the EAGLE head's tree, or plain decoding, per lane and per step, by one cost model
(homespec.speculative.guard: the measured cost of a pass by rows, each drafter's measured drafting
time, and each candidate's expected accepted length).

A lookup's chain is known before the choice, for free: its expected accepted length comes from
its own drafter's live statistics, keyed by what it knew up front, the length of the match that
found it (`CopyStats`: P(accepted >= j) per source and match-length bucket, from a prior that
counts as `PRIOR_WEIGHT` drafts). A model drafter (the EAGLE head) must draft to know its tree:
its offer is priced with the guard's own acceptance (alpha, from the head's record) and its
measured time per level. For a step of lanes i with options o_i (plain: 1 row, 1 token)

    rate = sum_i tokens(o_i) / (cost(sum_i rows(o_i) + extra) + sum_i draft_s(o_i))

is raised one lane at a time (each lane's best option given the others', until nothing changes;
from all plain, at most three sweeps), and the result is used only where it beats all-plain by
the guard's margin. Worked example (this CPU, SmolLM2: cost(1) = 12.5 ms, cost(5) = 32 ms): a
lookup of 4 tokens from a 16-token match with P(accepted >= j) = 0.9, 0.81, 0.73, 0.66 is worth
(1 + 3.1) / 32 ms = 0.128 tokens/ms against plain 1 / 12.5 ms = 0.080: 1.6x, so it is verified;
the same chain from a 1-token match (0.15, 0.13, 0.11, 0.09) is worth 1.48 / 32 ms = 0.046: plain.

A lookup that loses does not start the guard's backoff: its statistics fall at once for the
match length that failed, which is the finer lesson. The backoff still follows model drafts.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Protocol, Sequence

from homespec.contracts.drafter import Offer
from homespec.plan.lookups import pooled_alpha, read_record

BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)  # match lengths whose statistics are kept apart
PRIOR_WEIGHT = 4.0  # drafts the prior counts as
# P(the first token of a chain is accepted) by match-length bucket, where homespec has no record,
# and the chance each further token is accepted after the one before: a long match is a copy in
# progress, a one-token match a common word. Optimistic on purpose: an unpromising bucket is tried
# a few times and its own statistics then decide (a pessimistic prior would never be corrected).
FIRST = {1: 0.15, 2: 0.3, 3: 0.45, 4: 0.55, 6: 0.6, 8: 0.7, 12: 0.75, 16: 0.8, 24: 0.85, 32: 0.9}
FOLLOW = 0.85


class Prices(Protocol):
    """What the choice reads from the guard (speculative.guard.BatchGuard) and the one figure it sets."""

    depth: int  # the head's deepest draft
    margin: float  # how much a choice must beat plain decoding by
    costs: dict[int, float]  # batch rows -> seconds per target pass
    draft_level_s: float  # drafting time per level and sequence
    copies: CopyStats  # the lookups' acceptance by source and match length
    predicted: float | None  # set: the chosen step's tokens per second over plain decoding's

    @property
    def plain_left(self) -> int: ...

    def nodes(self, d: int) -> int: ...

    def alpha(self, d: int) -> float: ...

    def cost(self, rows: int, table: list[tuple[int, float]] | None = None) -> float: ...

    def table(self) -> list[tuple[int, float]]: ...


SWEEPS = 3


@dataclass(frozen=True, slots=True)
class Choice:
    """What a lane drafts this step: `offer` cut to `depth` (a chain's tokens, a model's levels;
    None: the drafter's own shape), or plain decoding (offer None)."""

    offer: Offer | None
    depth: int | None = 0

    @property
    def source(self) -> str | None:
        return None if self.offer is None or self.depth == 0 else self.offer.source


PLAIN = Choice(None, 0)


def bucket(length: int) -> int:
    """The match-length bucket a match of `length` tokens falls in (the largest bucket <= length)."""
    return BUCKETS[max(0, bisect.bisect_right(BUCKETS, max(1, length)) - 1)]


@dataclass
class CopyStats:
    """P(a known chain is accepted at least j tokens deep), per (source, match-length bucket)."""

    prior: dict[tuple[str, int], tuple[float, ...]] = field(default_factory=dict)  # recorded (else FIRST/FOLLOW)
    tried: dict[tuple[str, int], list[float]] = field(default_factory=dict)
    hits: dict[tuple[str, int], list[float]] = field(default_factory=dict)

    def alpha(self, source: str, length: int, j: int) -> float:
        return self.tokens(source, length, j)[j] - self.tokens(source, length, j - 1)[j - 1]

    def tokens(self, source: str, length: int, n: int) -> list[float]:
        """Expected tokens of a step verifying the first 0..n tokens of the chain: [1, 1 + a1, ...]."""
        key = (source, bucket(length))
        tried, hits, rec = self.tried.get(key, ()), self.hits.get(key, ()), self.prior.get(key)
        out = [1.0]
        for j in range(1, n + 1):
            if rec:
                prior = rec[j - 1] if j <= len(rec) else rec[-1] * FOLLOW ** (j - len(rec))
            else:
                prior = FIRST[key[1]] * FOLLOW ** (j - 1)
            t = tried[j - 1] if j <= len(tried) else 0.0
            h = hits[j - 1] if j <= len(hits) else 0.0
            out.append(out[-1] + (h + PRIOR_WEIGHT * prior) / (t + PRIOR_WEIGHT))
        return out

    def record(self, source: str, length: int, drafted: int, accepted: int) -> None:
        key = (source, bucket(length))
        tried, hits = self.tried.setdefault(key, []), self.hits.setdefault(key, [])
        while len(tried) < drafted:
            tried.append(0.0)
            hits.append(0.0)
        for j in range(1, drafted + 1):
            tried[j - 1] += 1
            hits[j - 1] += accepted >= j

    def as_json(self) -> dict:
        """Per source and bucket: drafts seen and P(accepted >= j) now."""
        out: dict[str, dict] = {}
        for (source, b), tried in sorted(self.tried.items()):
            out.setdefault(source, {})[str(b)] = {
                "drafts": int(tried[0]) if tried else 0,
                "alpha": [round(self.alpha(source, b, j), 3) for j in range(1, min(len(tried), 8) + 1)]}
        return out


def read_copy_prior() -> dict[tuple[str, int], tuple[float, ...]]:
    """The lookups' recorded acceptance by match-length bucket, pooled over homespec's dev sets
    (homespec.plan.lookups), or {} where there is none."""
    return pooled_alpha(read_record())


# An option of one lane: (choice, rows, expected tokens, drafting seconds)
_Option = tuple[Choice, int, float, float]
_PLAIN_OPTION: _Option = (PLAIN, 1, 1.0, 0.0)


def options(guard: Prices, offers: Sequence[Offer], model_ok: bool) -> list[_Option]:
    """Plain first, then every cut of every known chain, then every depth of a model's draft."""
    out = [_PLAIN_OPTION]
    for o in offers:
        if o.known:
            gains = guard.copies.tokens(o.source, o.key, len(o.tokens))
            out += [(Choice(o, n), 1 + n, gains[n], 0.0) for n in range(1, len(o.tokens) + 1)]
        elif model_ok:
            gains = [1.0]
            for d in range(1, guard.depth + 1):
                gains.append(gains[-1] + guard.alpha(d))
            out += [(Choice(o, d), guard.nodes(d), gains[d], d * guard.draft_level_s)
                    for d in range(1, guard.depth + 1)]
    return out


def choose_each(guard: Prices, offers: Sequence[Sequence[Offer]], extra: int) -> list[Choice]:
    """Each lane's choice for this step (see the module docstring): lane by lane, the option
    that raises the step's tokens per second most, given the other lanes' choices."""
    n = len(offers)
    table = guard.table()
    memo: dict[int, float] = {}

    def cost(rows: int) -> float:
        if rows not in memo:
            memo[rows] = guard.cost(rows, table)
        return memo[rows]

    model_ok = guard.plain_left == 0
    opts = [options(guard, lane, model_ok) if lane else [_PLAIN_OPTION] for lane in offers]
    picked = [o[0] for o in opts]
    rows, tokens, draft_s = n + extra, float(n), 0.0
    plain = n / cost(n + extra)
    for _ in range(SWEEPS if n > 1 else 1):  # one lane: its best option is found in one pass
        changed = False
        for i, lane in enumerate(opts):
            if len(lane) == 1:
                continue
            _, r, t, d = picked[i]
            r0, t0, d0 = rows - r, tokens - t, draft_s - d
            best = max(lane, key=lambda o: (t0 + o[2]) / (cost(r0 + o[1]) + d0 + o[3]))
            if best is not picked[i]:
                picked[i], changed = best, True
                rows, tokens, draft_s = r0 + best[1], t0 + best[2], d0 + best[3]
        if not changed:
            break
    rate = tokens / (cost(rows) + draft_s)
    guard.predicted = rate / plain
    if rate < plain * (1 + guard.margin):
        return [PLAIN] * n
    return [o[0] for o in picked]


def forced(offers: Sequence[Offer], depth: int | None) -> Choice:
    """Without a guard's choice: the longest known chain whole, else the model's draft at `depth`
    (None: the drafter's own shape), else plain."""
    known = [o for o in offers if o.known]
    if known:
        best = max(known, key=lambda o: (len(o.tokens), o.key))
        return Choice(best, len(best.tokens))
    model = next((o for o in offers if not o.known), None)
    return PLAIN if model is None else Choice(model, depth)
