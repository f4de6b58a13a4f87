"""One engine step: every lane's work in one target pass, whoever asked for the answers.

    1. each decoding lane's drafters say what they offer (a lookup's chain, found now; a model's
       draft, made when chosen), and the guard chooses per lane one offer and its depth, or plain
       decoding, from the costs of the passes it has measured and each drafter's acceptance
       (homespec.speculative.guard, homespec.speculative.choice);
    2. each decoding lane drafts its tree (or its root alone);
    3. what is left of the pass (n_batch rows) carries prompt chunks of lanes still prefilling,
       so a long prompt never stalls the answers already streaming;
    4. one target pass (`Lanes.decode`) for all of it; then each lane verifies, commits, resyncs
       its drafter and streams its tokens (homespec.engine.running), and the guard learns what
       the pass cost and what the drafts earned.

chat, generate and bench run it with one lane, serve with many: there is no other loop.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

from homespec.engine.api import as_error
from homespec.speculative.choice import PLAIN, forced

if TYPE_CHECKING:
    from homespec.contracts.backend import Forward, Lanes, PrefillWork, TreeWork
    from homespec.speculative.choice import Choice
    from homespec.speculative.guard import BatchGuard
    from homespec.engine.running import Running
    from homespec.speculative.steps import Step


@dataclass(frozen=True, slots=True)
class Outcome:
    steps: tuple["Step", ...]  # the verification steps (and first tokens) the pass produced
    rows: int  # rows the pass carried
    seconds: float  # the target pass alone


def run_step(target: "Lanes", running: Sequence["Running"], guard: "BatchGuard | None", *, prefill_chunk: int,
             before_pass: Callable[[], None] = lambda: None) -> Outcome:
    """One pass over `running` (each request in its own lane). Raises what the pass raised: the
    engine then fails the requests it carried (Engine._fail)."""
    t0 = time.perf_counter()
    decoding = [r for r in running if not r.prefilling]
    prefilling = [r for r in running if r.prefilling]
    extra = _prefill_rows(target, decoding, prefilling, prefill_chunk)
    decoding, choices = _choose(decoding, guard, extra)
    work: list["PrefillWork | TreeWork"] = []
    owners: list["Running"] = []
    for r, choice in zip(decoding, choices):  # --- draft: a tree rooted at each lane's pending token
        try:  # a request whose draft fails is failed alone and left out of this pass
            work.append(r.draft(choice, target))
        except Exception as e:  # noqa: BLE001
            fail_alone(r, e)
            continue
        owners.append(r)
    budget = min(prefill_chunk, max(1, target.batch_rows - sum(len(w.tokens) for w in work)))
    for r in prefilling:  # --- prompt chunks ride along in what is left of the pass -----------
        chunk = r.prefill_chunk(budget)
        if chunk is not None:
            budget -= len(chunk.tokens)
            work.append(chunk)
            owners.append(r)
    if not work:  # every decoding request failed its draft: nothing to pass
        return Outcome((), 0, 0.0)
    before_pass()
    t1 = time.perf_counter()
    outs = target.decode(work)  # --- one target pass: logits [T, V] and features per item -------
    t_pass = time.perf_counter() - t1
    rows = sum(len(w.tokens) for w in work)
    steps, verified = _verify_all(owners, outs, target, guard, t_pass, time.perf_counter() - t0)
    if guard is not None:  # --- the guard learns the pass's cost and the drafts' worth --------
        guard.record_pass(rows, t_pass)
        guard.count(verified)
        if any(c.offer is not None and not c.offer.known and c.depth for c in choices):  # a model drafted
            spec = [s for s in verified if s.speculative]
            guard.record_step(len(spec), extra, sum(len(s.tokens) for s in spec),
                              t_pass + sum(s.t_draft for s in spec))
    return Outcome(tuple(steps), rows, t_pass)


def _choose(decoding: list["Running"], guard: "BatchGuard | None",
            extra: int) -> tuple[list["Running"], list["Choice"]]:
    """What each decoding lane drafts this step; without a guard, every drafter its longest
    chain or its own full shape (homespec.speculative.choice.forced). The lookups search only for
    matches long enough that their chains could pay this step (BatchGuard.match_floor); where
    none could, they do not search, and where nothing is then on offer, the step is plain without
    a choice. A lane whose lookup fails is failed alone and left out."""
    reaches: dict[str, int] = {}
    for r in decoding:
        for source, reach in r.reaches.items():
            reaches[source] = max(reach, reaches.get(source, 0))
    floor = 1 if guard is None or not reaches else guard.match_floor(len(decoding), extra, reaches)
    kept, offers = [], []
    for r in decoding:
        try:
            offers.append(r.offers(floor))
        except Exception as e:  # noqa: BLE001
            fail_alone(r, e)
            continue
        kept.append(r)
    if guard is None:
        return kept, [forced(o, None) for o in offers]
    if reaches and not floor:
        guard.unsearched += len(kept)
        if not any(offers):
            guard.skip()
            return kept, [PLAIN] * len(kept)
    return kept, guard.choose_lanes(offers, extra)


def _prefill_rows(target: "Lanes", decoding: list["Running"], prefilling: list["Running"], chunk: int) -> int:
    """Rows of prompt chunks this pass will carry beside the decoding lanes' trees."""
    left = sum(len(r.prompt) - r.fed for r in prefilling)
    return min(left, chunk, max(0, target.batch_rows - len(decoding)))


def _verify_all(owners: list["Running"], outs: list["Forward"], target: "Lanes", guard: "BatchGuard | None",
                t_pass: float, t_step: float) -> tuple[list["Step"], list["Step"]]:
    """Verify, commit and emit each decoding lane's tree; take each prompt chunk's result.
    -> (every step, the verification steps among them)."""
    steps: list["Step"] = []
    verified: list["Step"] = []
    for r, fwd in zip(owners, outs):
        try:  # one request's verification failing fails that request alone
            if r.tree is not None:  # decoding: verify, commit, emit
                step = r.verified(fwd, target, t_pass, t_step)
                steps.append(step)
                verified.append(step)
                if guard is not None and step.draft_size > 0:
                    _learn(guard, r, step)
            else:
                before = len(r.steps)
                r.prefilled(fwd, target, t_pass, t_step)
                steps.extend(r.steps[before:])
        except Exception as e:  # noqa: BLE001
            fail_alone(r, e)
    return steps, verified


def _learn(guard: "BatchGuard", r: "Running", step: "Step") -> None:
    """The guard learns what a lane's draft earned: a known chain by its match length, a model's
    tree by depth (and its drafting time)."""
    offer = r.choice.offer
    if offer is not None and offer.known:
        guard.record_copy(offer.source, offer.key, step.draft_size, step.accepted)
    else:
        guard.record_draft(step.draft_size, step.accepted, r.depth, step.t_draft)


def fail_alone(r: "Running", e: Exception) -> None:
    """One request's own failure: it ends with its error when the engine next reaps (its lane is
    then emptied); the requests beside it go on."""
    r.handle.error = as_error(e, r.handle)
    r.end(None)
