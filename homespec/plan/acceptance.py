"""Tokens per target pass (τ) for a draft tree of T nodes and depth D, from acceptance per depth.

    τ(T, D) = 1 + Σ_{d=1}^{min(D, T−1)} a_d(T)

a_d(T) is the share of target passes that accept at least d drafted tokens (the bonus token makes
the 1). A tree of T nodes, the root included, holds T − 1 drafted tokens, so it can accept at most
T − 1 of them: a 1-node tree is the root alone and τ(1) = 1.

a_d(T) comes from anchors, each a node count with its per-depth shares:
* a head's recorded acceptance (`acceptance.json`, homespec.formats.acceptance), one anchor per shape;
* else a τ without per-depth figures (calibrated, published, or homespec's assumption), spread
  over depths as Leviathan et al. 2023 ("Fast Inference from Transformers via Speculative
  Decoding", eq. 1) do: each drafted token accepted with the same probability α, a_d = α^d,
  α chosen so that 1 + Σ_{d ≤ D} α^d = τ.

Between two anchors a_d is interpolated linearly in ln T (EAGLE-2, arXiv 2406.16858: acceptance
grows by about a constant per doubling of the node budget); above the largest anchor it stays
there (no credit beyond what was measured or assumed). Below the smallest anchor a_d stays at that
anchor's value: exact for a chain (a chain cut to T − 1 tokens accepts at least d of them exactly
as often as the longer chain does, for d ≤ T − 1); for a tree, the gain τ − 1 is also held to
ln T / ln T_anchor of the anchor's, falling to 0 at the root alone. Anchors are made
non-decreasing in T depth by depth (the dynamic tree of T nodes keeps the best T − 1 candidates, a
superset of the best T' − 1 for T' < T, so it accepts at least as much), hence τ never decreases
as T or D grows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from homespec.types import AcceptanceRecord, DraftSpec

# homespec's assumption where a draft brings no figures: an EAGLE-3 head on chat at T=0 accepts
# 3.5 tokens per pass with a 60-node tree of depth 7 (the EAGLE-3 paper, arXiv 2503.01840, Table 1,
# reports 5-6.5 for trained 8B heads with such trees; homespec assumes less); a draft model's
# chain 2.5 (Leviathan et al. 2023 measure 2-3.5 tokens per pass for T5/LaMDA draft models).
DEFAULT_TAU = {"eagle3": 3.5, "eagle3.1": 3.5, "model": 2.5}
# An MTP layer's next-but-one token is accepted 85-90 % of the time (DeepSeek-V3 technical report,
# arXiv 2412.19437, section 5.4.3); homespec takes 0.85 per drafted token along the chain.
MTP_ACCEPT = 0.85
DEFAULT_TREE_NODES = 60
DEFAULT_TREE_DEPTH = 7


@dataclass(frozen=True, slots=True)
class Anchor:
    nodes: int  # tree size T the shares were measured (or assumed) at, root included
    at_least: tuple[float, ...]  # a_d for d = 1..len
    chain: bool  # topk 1: exact for every shorter chain too


@dataclass(frozen=True, slots=True)
class AcceptanceModel:
    anchors: tuple[Anchor, ...]  # sorted by nodes, shares non-decreasing from one to the next
    source: str  # where the figures come from, for the estimate's label

    def at_least(self, nodes: int) -> tuple[float, ...]:
        """a_d(T) for d = 1.. (before the depth cap)."""
        first, last = self.anchors[0], self.anchors[-1]
        if nodes >= last.nodes:
            return last.at_least
        if nodes <= first.nodes:
            return first.at_least  # a smaller tree: per depth at most what the smallest anchor accepts
        lo, hi = next((a, b) for a, b in zip(self.anchors, self.anchors[1:]) if a.nodes <= nodes <= b.nodes)
        w = math.log(nodes / lo.nodes) / math.log(hi.nodes / lo.nodes)
        return tuple(x + (y - x) * w for x, y in zip(_pad(lo.at_least, len(hi.at_least)), hi.at_least))

    def tau(self, nodes: int, depth: int) -> float:
        """Expected tokens per target pass of a `nodes`-node tree at most `depth` deep."""
        reach = max(0, min(depth, nodes - 1))
        gain = sum(self.at_least(nodes)[:reach])
        first = self.anchors[0]
        if not first.chain and nodes < first.nodes:
            # Below the smallest tree on record, also at most the share of its gain that ln T is
            # of ln T_first (a constant gain per doubling of the nodes, from 0 at the root alone).
            gain = min(gain, sum(first.at_least[:depth]) * math.log(max(1, nodes)) / math.log(first.nodes))
        return 1.0 + gain


def _pad(a: tuple[float, ...], n: int) -> tuple[float, ...]:
    return a + (0.0,) * (n - len(a))


def geometric(tau: float, depth: int) -> tuple[float, ...]:
    """a_d = α^d, d = 1..depth, with 1 + Σ a_d = tau (clamped to 1 ≤ tau ≤ depth + 1)."""
    depth = max(1, depth)
    target = min(max(tau, 1.0), depth + 1.0) - 1.0
    lo, hi = 0.0, 1.0
    for _ in range(60):  # bisection: Σ α^d grows with α
        mid = (lo + hi) / 2
        if sum(mid ** d for d in range(1, depth + 1)) < target:
            lo = mid
        else:
            hi = mid
    alpha = (lo + hi) / 2
    return tuple(alpha ** d for d in range(1, depth + 1))


def _monotone(anchors: list[Anchor]) -> tuple[Anchor, ...]:
    """Sort by size, merge equal sizes, and make each depth's share non-decreasing in T."""
    merged: dict[int, Anchor] = {}
    for a in sorted(anchors, key=lambda a: (a.nodes, not a.chain)):
        prev = merged.get(a.nodes)
        if prev is not None:
            n = max(len(prev.at_least), len(a.at_least))
            a = Anchor(a.nodes, tuple(map(max, _pad(prev.at_least, n), _pad(a.at_least, n))), prev.chain and a.chain)
        merged[a.nodes] = a
    out: list[Anchor] = []
    for a in merged.values():
        if out:
            n = max(len(out[-1].at_least), len(a.at_least))
            a = Anchor(a.nodes, tuple(map(max, _pad(out[-1].at_least, n), _pad(a.at_least, n))), a.chain)
        out.append(a)
    return tuple(out)


def _from_records(records: tuple[AcceptanceRecord, ...]) -> AcceptanceModel:
    anchors = [Anchor(r.total, tuple(min(1.0, max(0.0, x)) for x in r.at_least), r.topk == 1) for r in records]
    shapes = ", ".join(f"{'chain' if r.topk == 1 else 'tree'} {r.depth}/{r.topk}/{r.total} τ {1 + sum(r.at_least):.2f}"
                       for r in records)
    return AcceptanceModel(_monotone(anchors), f"recorded in {records[0].source or 'acceptance.json'}: {shapes}")


def acceptance_model(draft: DraftSpec, tree_tokens: int, depth: int) -> AcceptanceModel:
    """What τ(T, D) is built from for this draft: a measured τ (--calibrate, or a published figure)
    taken at the plan's own tree, else the head's recorded acceptance, else homespec's assumption."""
    chain = draft.kind in ("model", "mtp")
    if draft.kind == "mtp" and not draft.expected_tau:
        anchor = Anchor(depth + 1, tuple(MTP_ACCEPT ** d for d in range(1, depth + 1)), True)
        return AcceptanceModel((anchor,), f"assumed {MTP_ACCEPT:.0%} acceptance per MTP token, chained")
    if draft.expected_tau:
        nodes = depth + 1 if chain else max(2, tree_tokens)
        anchor = Anchor(nodes, geometric(draft.expected_tau, depth), chain)
        return AcceptanceModel((anchor,), f"τ {draft.expected_tau:.2f} measured for this draft")
    usable = tuple(r for r in draft.acceptance if r.total >= 2 and r.at_least)
    if usable and not chain:
        return _from_records(usable)
    tau = DEFAULT_TAU.get(draft.kind, 3.0)
    if chain:  # a draft model proposes a chain of `depth` tokens
        return AcceptanceModel((Anchor(depth + 1, geometric(tau, depth), True),),
                               f"assumed τ {tau} for a draft model's chain")
    anchor = Anchor(DEFAULT_TREE_NODES, geometric(tau, DEFAULT_TREE_DEPTH), False)
    return AcceptanceModel((anchor,), f"assumed τ {tau} at a {DEFAULT_TREE_NODES}-node tree of depth {DEFAULT_TREE_DEPTH}")
