"""The engine thread's last line of defence: what happens if it stops anyway.

Each engine fails a request's own error on that request alone (a per-request try around its
share of a step). Should the thread still stop — an exception the engine could not pin on one
request, a library calling sys.exit — `supervised` records why, logs the traceback, and hands the
engine's `on_death`, which fails every request still waiting or running at once (each gets its
500 now rather than hanging), so that `submit` refuses new ones and `/health` answers 503 with
the reason; the server then exits non-zero (homespec.server.run) for whatever supervises it to
restart. Carry this over to any engine: a thread that dies silently leaves every client hanging.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

from homespec.errors import HomespecError

log = logging.getLogger("homespec.engine")


class Supervised:
    """A daemon thread running `run`; `failure` says why it stopped if it did before close."""

    def __init__(self, run: Callable[[], None], on_death: Callable[[HomespecError], None]) -> None:
        self.failure: str | None = None
        self._run, self._on_death = run, on_death
        self.thread = threading.Thread(target=self._target, name="homespec-engine", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _target(self) -> None:
        try:
            self._run()
        except BaseException as e:  # noqa: BLE001 - SystemExit too: the thread is gone either way
            self.failure = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
            log.critical("the engine stopped: %s", self.failure, exc_info=e)
            try:
                self._on_death(HomespecError(f"the engine stopped: {self.failure}",
                                             hint="the server exits; restart it"))
            except BaseException:  # noqa: BLE001 - nothing is left to tell
                log.critical("failing the waiting requests failed too", exc_info=True)
