"""How many users at this context fit: the largest --parallel N whose plan still fits (`plan --max-parallel`).

Each sequence brings its own KV cells in every layer (llama-server -np N: one stream of n_ctx cells per
sequence), its SWA windows and recurrent state, its share of llama.cpp's output buffer and, with a draft,
the draft's KV and tree scratch: plan/memory.py multiplies each by n_seq. The search re-solves the plan,
so placement (layers on the GPUs, experts in RAM) follows N as the solver would place it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from homespec.plan.fit import FITS, Plan, solve
from homespec.plan.settings import MAX_SEQ
from homespec.plan.suggest import advise
from homespec.types import DraftSpec, Machine, ModelSpec


@dataclass(frozen=True, slots=True)
class MostSequences:
    plan: Plan  # the plan at the largest N (at N = 1 when not even one sequence fits)
    n_seq: int  # 0: not even one sequence fits
    note: str


def most_sequences(model: ModelSpec, draft: DraftSpec | None, machine: Machine, plan_one: Plan) -> MostSequences:
    """The largest N in 1..MAX_SEQ whose plan keeps one sequence's verdict class: entirely on the GPUs when
    one sequence is (more users should not push layers to the CPU), else fitting at all."""
    s = plan_one.settings
    if not plan_one.fits:
        note = f"--max-parallel: not even one sequence of {s.n_ctx} tokens fits"
        return MostSequences(replace(plan_one, notes=(*plan_one.notes, note)), 0, note)
    whole = plan_one.verdict == FITS

    def ok(p: Plan) -> bool:
        return p.verdict == FITS if whole else p.fits

    def at(n: int) -> Plan:
        return solve(model, draft, machine, s.with_(n_seq=n, n_gpu_layers=0, layer_split=()))

    lo, hi, best = 2, MAX_SEQ, None
    while lo <= hi:
        mid = (lo + hi) // 2
        p = at(mid)
        if ok(p):
            best, lo = (mid, p), mid + 1
        else:
            hi = mid - 1
    n = best[0] if best is not None else 1
    where = "entirely on the GPU(s)" if whole and machine.gpus else ("in RAM" if not machine.gpus else "")
    note = f"--max-parallel: {n} sequence(s) of {s.n_ctx} tokens fit{' ' + where if where else ''}"
    if n < MAX_SEQ:
        over = at(n + 1)
        tight = over.tightest
        why = f"{_gib(-over.headroom_bytes)} over on {tight.device.label}" if tight and over.headroom_bytes < 0 else \
            "it no longer fits " + (where or "")
        note += f"; {n + 1} would not ({why.strip()})"
    chosen = plan_one if n == 1 else advise(solve(model, draft, machine, s.with_(n_seq=n, n_gpu_layers=0, layer_split=())))
    return MostSequences(replace(chosen, notes=(*chosen.notes, note)), n, note)


def fewest_pushed(plan_one: Plan, most: int, solve_at: Callable[[int], Plan]) -> Plan:
    """The lanes `homespec serve` opens when --parallel is left out: the plan for the most of most, most/2,
    ..., 1 sequences that fits as well as the plan for one does (`plan_one`): the same verdict, no layer
    more pushed off the GPU. `solve_at(n)`: the plan for n sequences, solved as plan_one was."""
    n = most
    while n > 1:
        plan = solve_at(n)
        if plan.verdict == plan_one.verdict and plan.offloaded_layers <= plan_one.offloaded_layers:
            return plan
        n //= 2
    return plan_one


def _gib(n: int) -> str:
    return f"{n / (1 << 30):,.2f} GiB"
