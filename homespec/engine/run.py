"""decode(): one sequence on a loaded backend, as token-level Steps (tests, head evaluation, benches).

The same engine and step as every command (homespec.engine.core), with one lane over `backend`,
`drafter` drafting its full shape each step (or under `guard`), no text and no prompt reuse.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Sequence

from homespec.engine.api import EngineRequest
from homespec.engine.assemble import RunParts
from homespec.engine.core import Engine, follow
from homespec.engine.lanes import OneLane
from homespec.engine.options import RunOptions
from homespec.engine.responses import StepFigures
from homespec.speculative.steps import Limits, Step

if TYPE_CHECKING:
    from homespec.contracts.backend import Backend
    from homespec.contracts.drafter import Drafter
    from homespec.speculative.guard import BatchGuard
    from homespec.speculative.sampling import Sampler


def decode(backend: "Backend", drafter: "Drafter | None", prompt: Sequence[int], *, sampler: "Sampler | None" = None,
           limits: Limits = Limits(), seed: int = 0, guard: "BatchGuard | None" = None) -> Iterator[Step]:
    """Decode from `prompt` (token ids) on an empty cache: the prefill's step, then one step per
    verification, until EOS (unless limits.stop_at_eos is False), `limits.max_tokens` or the
    context's end (the last step's `finish`). Closing the generator ends it early."""
    parts = RunParts(OneLane(backend), [drafter], guard, getattr(backend, "model_path", ""), None,
                     drafter.shape if drafter is not None else None, RunOptions(), backend=backend,
                     text=False, stop_at_eos=limits.stop_at_eos)
    engine = Engine(parts, queue_size=1, cache_prompt=False)
    handle = engine.submit(EngineRequest(tuple(int(t) for t in prompt), limits.max_tokens, sampler, (), seed))
    for r in follow(engine, handle):
        if isinstance(r, StepFigures):
            yield r.step
