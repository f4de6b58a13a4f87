"""Session: what a run needs (target backend, drafter, guard), opened once, streaming answers.

    session = Session.open(RunOptions(...))            # plan, target, drafter, guard
    for r in session.stream(ids, sampler=..., limits=..., stop=...):
        ...                                            # StepFigures, TextDelta, ..., Finish

chat, generate and bench consume the same stream; it holds no terminal or rendering code.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from homespec.session.detok import Detokenizer
from homespec.session.options import RunOptions, check_options
from homespec.session.responses import Finish, Response, StepFigures, TextDelta
from homespec.speculative.loop import Limits, decode
from homespec.speculative.sampling import torch_seed

if TYPE_CHECKING:
    from homespec.backends.base import Backend
    from homespec.plan.fit import Plan
    from homespec.speculative.guard import Guard
    from homespec.speculative.sampling import Sampler
    from homespec.speculative.drafters.base import Drafter
    from homespec.speculative.loop import Step


@dataclass
class Session:
    """A loaded target (and drafter, and the guard over it) ready to answer."""

    backend: "Backend"
    drafter: "Drafter | None"
    options: RunOptions
    model_path: str
    plan: "Plan | None" = None
    draft_backend: "Backend | None" = None
    owns_backend: bool = True  # False: a target shared with other sessions, closed by whoever loaded it
    _guard: "Guard | None" = field(default=None, init=False, repr=False)
    _guard_made: bool = field(default=False, init=False, repr=False)

    @classmethod
    def open(cls, opt: RunOptions, *, with_plan: bool = True, target: "Backend | None" = None) -> "Session":
        """Check the options, plan, load the target, then the drafter (an EAGLE drafter must exist
        before the prefill: it tells the backend which layers' features to capture). `target`: a
        target already loaded for `opt.model` to draft on (its owner closes it)."""
        from homespec.session.load import make_drafter, open_backend, plan_for_run

        path = check_options(opt)
        plan = plan_for_run(opt, path) if with_plan else None
        backend = open_backend(path, opt, plan) if target is None else target
        try:
            drafter, draft_backend = make_drafter(backend, path, opt)
        except BaseException:
            if target is None:
                backend.close()
            raise
        return cls(backend, drafter, opt, path, plan, draft_backend, owns_backend=target is None)

    @property
    def guard(self) -> "Guard | None":
        """The guard over the drafter, made on first use and kept: what it learns carries over
        from one answer to the next. Making it may time this machine's steps (guard_needs_timing)."""
        if not self._guard_made:
            from homespec.session.load import make_guard

            self._guard = make_guard(self.backend, self.drafter, self.options)
            self._guard_made = True
        return self._guard

    @property
    def guard_needs_timing(self) -> bool:
        """Making the guard will first time plain and speculative steps (a wait worth naming)."""
        from homespec.session.load import guard_prior

        return not self._guard_made and guard_prior(self.drafter, self.options) is not None

    def stream(self, prompt: Sequence[int], *, sampler: "Sampler | None" = None, limits: Limits = Limits(),
               stop: Sequence[str] = (), seed: int = 0) -> Iterator[Response]:
        """Answer `prompt` (token ids) from a fresh cache: StepFigures and TextDelta per step, then
        the Finish. Stop strings end the answer before their first occurrence (finish "stop").
        Closing the iterator early (Ctrl-C in chat) ends the answer between two steps."""
        import torch

        guard = self.guard
        self.backend.reset()
        if self.drafter is not None:
            self.drafter.reset()
        steps = decode(self.backend, self.drafter, prompt, sampler=sampler, limits=limits,
                       generator=torch.Generator().manual_seed(torch_seed(seed)), controller=guard)
        return _answer(steps, Detokenizer(self.backend.tokenizer, stop), prompt)

    def close(self) -> None:
        for b in (self.draft_backend, self.backend if self.owns_backend else None):
            if b is not None:
                b.close()

    def memory(self) -> dict[str, Any]:
        """Measured (the engine's own report) beside planned bytes, for --json and chat."""
        rep = self.backend.memory_report()
        out: dict[str, Any] = {
            "measured": {"weights_bytes": rep.weights_bytes, "kv_bytes": rep.kv_bytes,
                         "compute_bytes": rep.compute_bytes, "total_bytes": rep.total_bytes, "device": rep.device},
        }
        if self.plan is not None:
            items = self.plan.items
            out["planned"] = {
                "weights_bytes": sum(i.bytes for i in items if i.name in ("weights", "weights (CPU repack)")),
                "kv_bytes": sum(i.bytes for i in items if i.name == "target KV"),
                "compute_bytes": sum(i.bytes for i in items if i.name == "compute"),
                "total_bytes": self.plan.total_bytes,
            }
        return out


def _answer(steps: Iterator["Step"], detok: Detokenizer, prompt: Sequence[int]) -> Iterator[Response]:
    """The loop's steps as responses: figures, then the text each step made final, then the end."""
    done: list["Step"] = []
    ids: list[int] = []
    parts: list[str] = []
    finish: str | None = None
    t0 = time.perf_counter()
    prefill_s = 0.0
    try:
        for step in steps:
            done.append(step)
            ids.extend(step.tokens)
            if len(done) == 1:
                prefill_s = time.perf_counter() - t0
            yield StepFigures(step, prefill=len(done) == 1)
            # the end-of-generation token has no text of its own
            text = detok.push(step.tokens[:-1] if step.finish == "eos" else step.tokens)
            parts.append(text)
            yield TextDelta(text, step.tokens)
            finish = step.finish
            if detok.stopped:
                break
    finally:
        steps.close()  # a stop string, or the consumer leaving early: the loop ends here
    tail = detok.flush()
    if tail:
        parts.append(tail)
        yield TextDelta(tail, ())
    yield Finish("stop" if detok.stopped else finish, "".join(parts), tuple(ids), tuple(prompt), tuple(done),
                 prefill_s, time.perf_counter() - t0 - prefill_s)
