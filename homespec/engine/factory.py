"""open_engine: the scheduler for a run's backend.

llama.cpp targets are served by the batching engine (homespec.engine.batched) where it is
installed with homespec; every other target, and llama.cpp without it, by SerialEngine, one
sequence at a time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from homespec.engine.api import Engine
    from homespec.session.options import RunOptions


def open_engine(opt: "RunOptions", *, parallel: int = 1, queue_size: int = 32) -> "Engine":
    """Load the target for `opt` behind the engine that serves it."""
    if opt.backend == "llamacpp":
        try:
            from homespec.engine.batched import BatchedEngine
        except ModuleNotFoundError as e:
            if e.name != "homespec.engine.batched":  # the module exists but something it needs does not
                raise
        else:
            return BatchedEngine.open(opt, parallel=parallel, queue_size=queue_size)
    from homespec.engine.serial import SerialEngine

    return SerialEngine.open(opt, parallel=parallel, queue_size=queue_size)
