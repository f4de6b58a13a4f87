"""Several sessions answering one prompt at once, a step of each in turn (bench --lockstep).

Machine speed that drifts over seconds then hits every session alike, so their speeds compare
step for step. Each answer's prefill_s and decode_s are the sums of its own steps' times, never
the others'.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterator, Sequence

from homespec.engine.responses import Finish, Response, StepFigures


def lockstep(streams: Sequence[Iterator[Response]]) -> list[Finish]:
    """Advance each stream by one loop step in turn (the order reversed every turn) -> each Finish."""
    ends: list[Finish | None] = [None] * len(streams)
    live = list(range(len(streams)))
    turn = 0
    while live:
        for i in (list(live) if turn % 2 == 0 else list(reversed(live))):  # a copy: finished ones leave `live`
            for r in streams[i]:  # up to and including the response of the step just run
                if isinstance(r, Finish):
                    ends[i] = r
                    live.remove(i)
                if isinstance(r, (StepFigures, Finish)):
                    break
        turn += 1
    out = []
    for end in ends:
        assert end is not None
        out.append(replace(end, prefill_s=end.steps[0].t_step if end.steps else 0.0,
                           decode_s=sum(s.t_step for s in end.steps[1:])))
    return out
