"""open_engine: the scheduler for a run's backend.

llama.cpp targets are served by the batching engine (homespec.engine.batched) where it is
installed with homespec; every other target, a separate draft model (--method draft: the
batching engine drafts with eagle3, ngram or none), and llama.cpp without it, by SerialEngine,
one sequence at a time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from homespec.engine.api import Engine
    from homespec.session.options import RunOptions


def open_engine(opt: "RunOptions", *, parallel: int = 1, queue_size: int = 32) -> "Engine":
    """Load the target for `opt` behind the engine that serves it."""
    if batches(opt):
        try:
            from homespec.engine.batched import BatchedEngine
        except ModuleNotFoundError as e:
            if e.name != "homespec.engine.batched":  # the module exists but something it needs does not
                raise
        else:
            return BatchedEngine.open(opt, parallel=parallel, queue_size=queue_size)
    from homespec.engine.serial import SerialEngine

    return SerialEngine.open(opt, parallel=parallel, queue_size=queue_size)


def batches(opt: "RunOptions") -> bool:
    """Whether open_engine serves `opt` on the batching engine (several sequences at once)."""
    return opt.backend == "llamacpp" and opt.method != "draft"


def default_parallel(opt: "RunOptions", path: str, *, gpu: str | None = None) -> int:
    """--parallel left out: what the plan fits on the batching engine (homespec.engine.load), else 1.
    `gpu`: plan for that GPU (plan's --gpu) instead of this machine."""
    if not batches(opt):
        return 1
    from homespec.engine.load import default_parallel as planned

    return planned(opt, path, gpu=gpu)
