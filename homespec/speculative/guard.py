"""Keep speculation honest: measure its real gain online, size the draft to what pays, and fall
back to plain decoding when it loses.

Speculation pays only when the tokens a step emits outweigh its cost. Both sides are measured,
never assumed: each step reports its wall time and tokens, the guard keeps exponentially weighted
rates for speculative steps and for plain steps, and

* if speculation emits fewer tokens per second than plain decoding (by `margin`) over the recent
  window (a clear loss, by `quick_margin`, already after `quick` steps), the next `backoff` steps
  run plain; then speculation is probed again, and each failed
  probe doubles the backoff (up to `max_backoff`), each success resets it;
* plain steps are sampled now and then even while speculation wins, so the plain rate stays
  current as the context grows (a step at 8K context costs more than one at 500);
* before it tries speculation (the first time, and each probe after a fallback) it predicts the
  result when it can: with the step costs measured at load (homespec.speculative.costs: verifying the
  drafter's tree and drafting, as multiples of a plain step) and the head's recorded acceptance
  on held-out prompts (P(accepted >= d) per depth), speculation would emit
  1 + sum_d P(accepted >= d) tokens in (verify_ratio + draft time / plain step) plain steps' time. If that
  is below plain decoding by `margin` the probe is skipped, since it would only cost time;
  it is predicted again at each later probe, as the plain step's cost changes with the context.
  Without costs or a recorded acceptance the guard probes as above;
* optionally (`adapt=True`) the draft depth follows a cost model fitted online: the verify time
  of a T-node tree as a + b.T (least squares over recent steps) and the fraction of steps that
  accepted at least d drafts (alpha_d). The depth D that maximises
  (1 + sum_{d<=D} alpha_d) / (a + b.T(D) + draft_time(D)) is chosen; on a CPU, where each extra
  node costs almost a whole forward, that is a short chain; on a GPU a deep tree. The guard reads
  the drafter's shape and sets it only through the Drafter protocol (`shape`, `limits()`,
  `set_shape(depth, total)`, homespec.speculative.drafters.base), never its attributes.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

from homespec.speculative.costs import StepCosts
from homespec.speculative.drafters.base import MAX_DEPTH
from homespec.speculative.loop import Controller, Step

if TYPE_CHECKING:
    from homespec.speculative.drafters.base import Drafter


@dataclass
class GuardStats:
    spec_steps: int = 0
    plain_steps: int = 0
    fallbacks: int = 0  # times speculation was switched off
    probes: int = 0  # times it was switched back on to try again
    depth_changes: int = 0
    skipped: int = 0  # probes skipped: speculation was predicted to lose
    predicted: float | None = None  # last predicted speculative / plain tokens per second


@dataclass
class Guard(Controller):
    drafter: "Drafter | None" = None  # read through .shape; reshaped with set_shape() when adapt=True
    margin: float = 0.03  # speculation must beat plain by this fraction to stay on
    window: int = 8  # speculative steps judged together
    quick: int = 2  # ... but a clear loss is judged after this many
    quick_margin: float = 0.25  # a clear loss: below plain by this fraction
    backoff: int = 16  # plain steps after a loss (doubles per failed probe)
    max_backoff: int = 256
    plain_every: int = 32  # sample one plain step this often while speculating
    adapt: bool = False
    max_depth: int = MAX_DEPTH  # deepest draft tried when adapting (the drafter's limits() may cap it)
    alpha: float = 0.2  # EWMA weight
    costs: StepCosts | None = None  # measured at load (homespec.speculative.costs.measure_costs)
    prior: Sequence[float] | None = None  # recorded P(accepted >= d), d = 1, 2, ... for the draft shape
    stats: GuardStats = field(default_factory=GuardStats)

    def __post_init__(self) -> None:
        self._spec_rate: float | None = None  # tokens / s of speculative steps
        self._plain_rate: float | None = None  # tokens / s of plain steps
        self._recent: deque[tuple[int, float]] = deque(maxlen=self.window)  # (tokens, seconds)
        self._plain_left = 2  # measure plain decoding first: the reference must exist
        self._since_plain = 0
        self._current_backoff = self.backoff
        self._probing = False
        self._verify: deque[tuple[int, float]] = deque(maxlen=64)  # (tree nodes, verify seconds)
        self._draft: deque[tuple[int, float]] = deque(maxlen=64)  # (depth, draft seconds)
        self._accepts: deque[int] = deque(maxlen=64)
        self._depths: deque[int] = deque(maxlen=64)  # draft depth of each step in _accepts
        base = self.drafter.shape if self.drafter is not None else None
        self._base_total = base.total if base is not None else None
        self._base_depth = base.depth if base is not None else None

    # --- Controller ----------------------------------------------------------------------------

    def speculate(self) -> bool:
        if self._plain_left > 0:
            return False
        if self.plain_every and self._since_plain >= self.plain_every:
            self._plain_left = 1
            self._since_plain = 0
            return False
        if not self._recent:  # about to start (or restart) speculating
            if not self._worth_trying():
                self._probing = False
                self._plain_left = max(1, self._current_backoff)  # predict again after the backoff
                self.stats.skipped += 1
                return False
            if self._probing:  # a probe is counted when it drafts, not when it is skipped
                self.stats.probes += 1
        return True

    def record(self, step: Step) -> None:
        if not step.tokens or step.t_step <= 0:
            return
        rate = len(step.tokens) / step.t_step
        if not step.speculative or step.draft_size == 0:
            self.stats.plain_steps += 1
            self._plain_rate = rate if self._plain_rate is None else _ewma(self._plain_rate, rate, self.alpha)
            self._verify.append((1, step.t_verify))
            if self._plain_left > 0:
                self._plain_left -= 1
                if self._plain_left == 0 and self.stats.spec_steps:  # backoff over: probe again
                    self._probing = True
                    self._recent.clear()
            return
        self.stats.spec_steps += 1
        self._since_plain += 1
        self._spec_rate = rate if self._spec_rate is None else _ewma(self._spec_rate, rate, self.alpha)
        self._recent.append((len(step.tokens), step.t_step))
        self._verify.append((step.draft_size + 1, step.t_verify))
        depth = self._depth()
        self._draft.append((depth or 1, step.t_draft))
        self._accepts.append(step.accepted)
        self._depths.append(depth or step.draft_size)
        if self.adapt and self.drafter is not None and len(self._accepts) >= 4:
            self._adapt_depth()
        if len(self._recent) >= self.quick and self._plain_rate:
            tokens = sum(t for t, _ in self._recent)
            seconds = sum(s for _, s in self._recent)
            # a clear loss is called after `quick` steps (each costs time plain decoding would
            # not have spent), a narrow one after min(window, 4)
            margin = self.margin if len(self._recent) >= min(self.window, 4) else self.quick_margin
            if tokens / seconds < self._plain_rate * (1 - margin):
                self._fall_back()
            elif self._probing and len(self._recent) >= self.window:
                self._probing = False
                self._current_backoff = self.backoff

    @property
    def speculating(self) -> bool:
        return self._plain_left == 0

    def summary(self) -> str:
        s = self.stats
        out = (f"guard: {s.spec_steps} speculative / {s.plain_steps} plain steps, {s.fallbacks} fallbacks, "
               f"{s.probes} probes" + (f", {s.depth_changes} depth changes" if self.adapt else ""))
        if s.skipped:
            out += f", {s.skipped} skipped (predicted {s.predicted:.2f}x plain)"
        return out

    def as_json(self) -> dict:
        """The counters, the last prediction and the step costs it was given (bench and generate JSON)."""
        st, c = self.stats, self.costs
        out = {"speculative_steps": st.spec_steps, "plain_steps": st.plain_steps, "fallbacks": st.fallbacks,
               "probes": st.probes, "skipped_probes": st.skipped,
               "predicted_speedup": None if st.predicted is None else round(st.predicted, 4)}
        if self.adapt:
            out["depth_changes"] = st.depth_changes
            out["depth"] = self._depth()
        if c is not None:
            out["costs"] = {"plain_ms": round(c.plain_s * 1e3, 3), "verify_ms": round(c.verify_s * 1e3, 3),
                            "draft_ms": round(c.draft_s * 1e3, 3), "nodes": c.nodes, "depth": c.depth}
        return out

    def predicted_gain(self) -> float | None:
        """Predicted speculative tokens/s over plain tokens/s for the drafter's current shape (the
        best depth when adapting); None when the costs, the prior or a plain measurement is missing."""
        if self.costs is None or not self.prior or not self._plain_rate:
            return None
        c = self.costs
        depth = self._depth() or c.depth
        plain_s = 1.0 / self._plain_rate  # a plain step emits one token
        draft_per_level = c.draft_s / max(1, c.depth)

        def gain(d: int) -> float:
            tokens = 1.0 + sum(self._prior_at(i) for i in range(1, d + 1))
            seconds = plain_s * c.verify_ratio_at(self._nodes_at(d)) + draft_per_level * d
            return tokens * plain_s / seconds

        return max(gain(d) for d in range(1, self._deepest() + 1)) if self.adapt else gain(depth)

    # --- internals -----------------------------------------------------------------------------

    def _depth(self) -> int | None:
        """The drafter's current depth (None without a drafter)."""
        return self.drafter.shape.depth if self.drafter is not None else None

    def _deepest(self) -> int:
        """The deepest draft the guard may set: its own max_depth within the drafter's limits."""
        limit = self.drafter.limits().max_depth if self.drafter is not None else None
        return max(1, min(self.max_depth, limit)) if limit is not None else self.max_depth

    def _worth_trying(self) -> bool:
        if self._spec_rate and self._plain_rate and self._spec_rate >= self._plain_rate * (1 - self.margin):
            return True  # measured, speculation was winning: measurement beats prediction
        g = self.predicted_gain()
        if g is None:
            return True
        self.stats.predicted = g
        return g >= 1 - self.margin

    def _nodes_at(self, d: int) -> int:
        """Tree nodes (root included) of a depth-d draft, scaled from the drafter's own shape:
        its non-root nodes per level times d, at least a chain of d."""
        base_depth = max(1, self._base_depth or 1)
        per_level = (self._base_total - 1) / base_depth if self._base_total else 1.0
        return 1 + max(d, round(per_level * d))

    def _prior_at(self, d: int) -> float:
        p = list(self.prior or ())
        if d <= len(p):
            return float(p[d - 1])
        return float(p[-1]) * UNSEEN_DECAY ** (d - len(p)) if p else 0.0

    def _fall_back(self) -> None:
        self.stats.fallbacks += 1
        self._plain_left = self._current_backoff
        if self._probing:  # the probe lost too: wait longer next time
            self._current_backoff = min(self.max_backoff, self._current_backoff * 2)
        self._probing = False
        self._recent.clear()

    def _adapt_depth(self) -> None:
        a, b = _fit_line(self._verify)
        per_depth = _mean_ratio(self._draft)
        current = self._depth() or 1
        deepest = self._deepest()
        # alpha_d from every recent step that drafted at least d tokens (earlier, deeper
        # settings included); unobserved depths decay from the last observed one, so an
        # untried depth never looks better than what was seen.
        alphas: list[float] = []
        for d in range(1, deepest + 1):
            tries = [acc for depth, acc in zip(self._depths, self._accepts) if depth >= d]
            if len(tries) >= 3:
                alphas.append(sum(1 for acc in tries if acc >= d) / len(tries))
            else:
                alphas.append((alphas[-1] if alphas else 1.0) * UNSEEN_DECAY)

        def value(d: int) -> float:
            return (1 + sum(alphas[:d])) / max(1e-6, a + b * self._nodes_at(d) + per_depth * d)

        best_d = max(range(1, deepest + 1), key=value)
        if best_d != current and value(best_d) > value(current) * (1 + HYSTERESIS):
            self.drafter.set_shape(*self.drafter.limits().clamp(best_d, self._nodes_at(best_d)))
            self.stats.depth_changes += 1


UNSEEN_DECAY = 0.7  # acceptance assumed for one depth beyond the deepest observed, relative to it
HYSTERESIS = 0.05  # change the depth only for a clear expected gain


def _ewma(old: float, new: float, a: float) -> float:
    return (1 - a) * old + a * new


def _fit_line(points) -> tuple[float, float]:
    """Least squares t = a + b.n over (n, t); b >= 0, and a plain mean when n never varied."""
    pts = list(points)
    n = len(pts)
    mx = sum(p[0] for p in pts) / n
    my = sum(p[1] for p in pts) / n
    var = sum((p[0] - mx) ** 2 for p in pts)
    if var == 0:
        return my, 0.0
    b = max(0.0, sum((p[0] - mx) * (p[1] - my) for p in pts) / var)
    return max(0.0, my - b * mx), b


def _mean_ratio(points) -> float:
    pts = list(points)
    if not pts:
        return 0.0
    return sum(t for _, t in pts) / max(1, sum(d for d, _ in pts))
