"""Progress events of `homespec draft train` and their default rendering (rich, on stderr)."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping


@dataclass(frozen=True, slots=True)
class Progress:
    phase: str  # "data" | "train" | "eval"
    done: int  # tokens generated (data) or optimiser steps (train)
    total: int
    info: Mapping[str, float] = field(default_factory=dict)  # tok/s, loss, acc@k, tau ...


ProgressFn = Callable[[Progress], None]


class RichProgress:
    """One rich progress bar per phase on stderr, with the event's numbers as its description."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress as Bars, TextColumn, TimeElapsedColumn

        self._bars = Bars(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                          console=Console(file=sys.stderr), transient=False)
        self._tasks: dict[str, int] = {}
        self._started = False

    def __enter__(self) -> "RichProgress":
        return self  # the display starts with the first event: an error before it stays one clean line

    def __exit__(self, *exc: object) -> None:
        if self._started:
            self._bars.stop()

    def __call__(self, ev: Progress) -> None:
        if not self._started:
            self._bars.start()
            self._started = True
        text = f"{ev.phase:5} " + " ".join(f"{k} {_fmt(v)}" for k, v in ev.info.items())
        if ev.phase not in self._tasks:
            self._tasks[ev.phase] = self._bars.add_task(text, total=ev.total)
        self._bars.update(self._tasks[ev.phase], completed=min(ev.done, ev.total), total=ev.total, description=text)


class LogProgress:
    """Plain lines on a stream (for logs of long background runs), at most one per `every` events."""

    def __init__(self, stream=None, every: int = 1) -> None:
        self._stream = stream or sys.stderr
        self._every = every
        self._n = 0

    def __call__(self, ev: Progress) -> None:
        self._n += 1
        if ev.phase == "eval" or self._n % self._every == 0:
            info = " ".join(f"{k}={_fmt(v)}" for k, v in ev.info.items())
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            print(f"{stamp} {ev.phase} {ev.done}/{ev.total} {info}", file=self._stream, flush=True)


def _fmt(v: float) -> str:
    return f"{v:.0f}" if abs(v) >= 100 or float(v).is_integer() else f"{v:.3f}"
