"""What homespec has measured of its lookups (prompt lookup, the suffix store) per workload, and what
a plan expects of each drafter on one: the same choice the guard makes step by step
(homespec.speculative.choice), made once from the plan's cost of a pass by rows.

The record, homespec/data/profiles/lookup_acceptance.json (benchmarks/suites/record_lookups.py: each lookup
drafting alone over a dev set), holds per workload and lookup, for each match-length bucket b,
how many drafts came from such a match (`tried[0]`, out of all the steps) and how many reached
each depth (`hits[j-1]` of `tried[j-1]`). So a step offers a chain from bucket b with share
p_b = tried_b[0] / steps, accepted at least j deep with alpha_b(j) = hits_b[j-1] / tried_b[j-1].

The expected rate: a step of bucket b that verifies L tokens emits tok_b(L) = 1 + sum_{j<=L}
alpha_b(j) in t(1 + L) (t: the plan's time of a pass of that many rows; L = 0 is plain). The
best cut per bucket maximises the overall rate R = sum_b p_b tok_b / sum_b p_b t_b (p_0 = the
steps without an offer, decoded plainly), found as the guard would: L_b = argmax tok_b(L) - R t(L),
R recomputed, until it settles (Dinkelbach's rule). Worked example: one bucket with p = 0.3 and
alpha = 0.9, 0.8, 0.7; t(1) = 10 ms, t(2) = 13, t(3) = 16, t(4) = 19 ms. From R = 0.1/ms the cut
of 3 is worth 3.4 - 1.9 = 1.5 (2 tokens: 2.7 - 1.6 = 1.1) against 1 - 1.0 = 0 for plain; then R = (0.7 + 0.3 x 3.4) /
(0.7 x 10 + 0.3 x 19) = 1.72 / 12.7 = 0.135/ms, 1.35x plain, and the cut stays at 3.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from homespec.plan.speed import Estimate

RECORD = Path(__file__).resolve().parent.parent / "data" / "profiles" / "lookup_acceptance.json"
WORKLOADS = ("chat", "code-edit")
NAMES = {"ngram": "prompt lookup", "suffix": "suffix store", "eagle3": "EAGLE head", "model": "draft model"}


@dataclass(frozen=True, slots=True)
class Bucket:
    share: float  # of all steps, those that offered a chain from a match of this bucket
    alpha: tuple[float, ...]  # P(accepted >= j), j = 1..


@dataclass(frozen=True, slots=True)
class DrafterOutlook:
    drafter: str  # "ngram", "suffix", "eagle3", ...
    speedup: float  # expected tokens/s over plain decoding's
    tau: float  # expected tokens per target pass
    basis: str  # where the acceptance comes from


def read_record(path: Path = RECORD) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def buckets(record: dict, workload: str, source: str) -> dict[int, Bucket]:
    """A lookup's measured buckets on a workload ({} where homespec has no record)."""
    try:
        entry = record["workloads"][workload]["sources"][source]
        steps = max(1, int(entry["steps"]))
        return {int(b): Bucket(v["tried"][0] / steps, _alpha(v["tried"], v["hits"]))
                for b, v in entry["buckets"].items() if v["tried"] and v["tried"][0]}
    except (KeyError, TypeError, ValueError, IndexError):
        return {}


def pooled_alpha(record: dict, min_drafts: int = 10) -> dict[tuple[str, int], tuple[float, ...]]:
    """P(accepted >= j) per (lookup, bucket), every workload's drafts together: the guard's prior."""
    tried: dict[tuple[str, int], list[int]] = {}
    hits: dict[tuple[str, int], list[int]] = {}
    try:
        for w in record.get("workloads", {}).values():
            for source, entry in w["sources"].items():
                for b, v in entry["buckets"].items():
                    for acc, add in ((tried, v["tried"]), (hits, v["hits"])):
                        cur = acc.setdefault((source, int(b)), [])
                        cur.extend([0] * (len(add) - len(cur)))
                        for j, x in enumerate(add):
                            cur[j] += int(x)
    except (KeyError, TypeError, ValueError, AttributeError):
        return {}
    return {k: _alpha(t, hits[k]) for k, t in tried.items() if t and t[0] >= min_drafts}


def _alpha(tried: list[int], hits: list[int]) -> tuple[float, ...]:
    return tuple(h / t for t, h in zip(tried, hits) if t > 0)


def lookup_outlook(by_bucket: dict[int, Bucket], t: Callable[[int], float], longest: int = 8) -> tuple[float, float]:
    """(speedup over plain, tokens per pass) of a lookup whose chains are cut where they pay (see
    the module docstring); `t(rows)`: seconds of a target pass of `rows` rows."""
    plain = 1.0 / t(1)
    rest = max(0.0, 1.0 - sum(b.share for b in by_bucket.values()))
    rate = plain
    for _ in range(20):
        tok, sec = rest, rest * t(1)
        for b in by_bucket.values():
            n = min(longest, len(b.alpha))
            gains = [1.0 + sum(b.alpha[:cut]) for cut in range(n + 1)]
            cut = max(range(n + 1), key=lambda c: gains[c] - rate * t(1 + c))
            tok, sec = tok + b.share * gains[cut], sec + b.share * t(1 + cut)
        new = tok / sec
        if abs(new - rate) < 1e-12 * max(1.0, rate):
            break
        rate = new
    steps = rest + sum(b.share for b in by_bucket.values())
    return rate / plain, tok / max(steps, 1e-12)


def workload_outlook(e: "Estimate", draft_kind: str | None, workload: str,
                     record: dict | None = None) -> tuple[DrafterOutlook, ...]:
    """Each drafter's expected speedup on `workload` with the plan's pass times, best first: the
    lookups from homespec's record, the draft head from the plan's own estimate."""
    rec = read_record() if record is None else record
    rows = e.rows_ms or (e.plain_ms,)

    def t(r: int) -> float:  # beyond the priced rows: the last step continued
        if r <= len(rows):
            return rows[r - 1] / 1e3
        step = rows[-1] - rows[-2] if len(rows) > 1 else rows[-1]
        return (rows[-1] + step * (r - len(rows))) / 1e3

    out = []
    for source in ("ngram", "suffix"):
        by = buckets(rec, workload, source)
        if by:
            w = rec["workloads"][workload]
            speedup, tau = lookup_outlook(by, t, longest=len(rows) - 1 if len(rows) > 1 else 8)
            out.append(DrafterOutlook(source, speedup, tau, f"measured with {rec.get('model', '?')} on {w['prompts']}"))
    if draft_kind is not None and e.speedup is not None:
        out.append(DrafterOutlook(draft_kind, e.speedup, e.expected_tau or 1.0, "estimated from its acceptance"))
    return tuple(sorted(out, key=lambda o: -o.speedup))


def outlook_line(workload: str, outlook: tuple[DrafterOutlook, ...]) -> str:
    """What `homespec plan --workload` says: who is expected to pay, and each drafter's figures."""
    if not outlook:
        return f"workload {workload}: homespec has no figures for its drafters here"
    best = outlook[0]
    lead = (f"--method auto is expected to draft mostly with the {NAMES.get(best.drafter, best.drafter)}"
            if best.speedup > 1.0 else "no drafter is expected to pay: --method auto decodes plainly")
    each = "; ".join(f"{NAMES.get(o.drafter, o.drafter)} {o.speedup:.2f}x (tau {o.tau:.2f}, {o.basis})" for o in outlook)
    return f"workload {workload}: {lead}. {each}"
