"""SerialEngine: the Engine protocol over one Session, one sequence at a time.

A worker thread takes requests from a bounded queue in arrival order and answers each with
Session.stream, putting every Response on the request's Handle. It checks `handle.cancelled`
after every response (between two steps of the decode loop) and then ends the answer with a
Finish whose reason is "cancelled". This is the engine of the torch and EXL2 targets, and of
llama.cpp until a batching engine takes over there (homespec.engine.factory). It decodes
every request with the session's own drafter and guard: `EngineRequest.speculate` is not read.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import logging
import math
import os
import queue
import threading
import time
from typing import TYPE_CHECKING

from homespec.engine.api import EngineClosed, EngineFailed, EngineRequest, EngineStats, Handle, QueueFull, fail
from homespec.engine.supervise import Supervised
from homespec.engine.tally import SpeedWindow, add_finish
from homespec.errors import HomespecError, UsageError

if TYPE_CHECKING:
    from homespec.backends.base import Tokenizer
    from homespec.session.core import Session
    from homespec.session.options import RunOptions
    from homespec.session.responses import Finish
    from homespec.speculative.loop import Step

log = logging.getLogger("homespec.engine")
_STOP = object()  # put on the queue by close(): the worker leaves


def check_slots(parallel: int, queue_size: int, most_parallel: int | None = None) -> None:
    """--parallel and --queue as an engine takes them (most_parallel: what this engine decodes at once)."""
    if parallel < 1:
        raise UsageError(f"--parallel {parallel} is not positive", hint="use --parallel 1 or more")
    if most_parallel is not None and parallel > most_parallel:
        raise UsageError(f"--parallel {parallel}: this engine decodes {most_parallel} sequence at a time",
                         hint="use --parallel 1; requests beyond it wait in the --queue")
    if queue_size < 1:
        raise UsageError(f"--queue {queue_size} is not positive", hint="use --queue 1 or more (waiting requests)")


class SerialEngine:
    """One loaded Session, one sequence decoded at a time, the rest waiting in a bounded queue."""

    def __init__(self, session: "Session", *, queue_size: int) -> None:
        self.session = session
        self.model_path = session.model_path
        self.n_ctx = session.backend.max_context
        self.n_vocab = session.backend.n_vocab  # the server checks prompts of token ids against it
        self.slots = 1
        self.queue_size = queue_size
        self._queue: "queue.Queue[object]" = queue.Queue()  # bounded by submit (close must always get in)
        self._lock = threading.Lock()
        self._stats = EngineStats(slots=1)
        self._speed = SpeedWindow()
        self._durations: "collections.deque[float]" = collections.deque(maxlen=8)  # recent answers' seconds
        self._ids = itertools.count(1)
        self._closed = threading.Event()
        self._running: Handle | None = None
        # the worker, watched: if it stops anyway, every request waiting on it fails at once
        self._super = Supervised(self._work, self._died)
        self._thread = self._super.thread
        self._super.start()

    @classmethod
    def open(cls, opt: "RunOptions", *, parallel: int = 1, queue_size: int = 32) -> "SerialEngine":
        """Load the session (and make its guard, which may time this machine's steps, now rather
        than in the first request) and start the worker."""
        from homespec.session.core import Session

        check_slots(parallel, queue_size, most_parallel=1)
        session = Session.open(opt)
        try:
            session.guard  # noqa: B018 - made (and timed) before the first request
        except BaseException:
            session.close()
            raise
        return cls(session, queue_size=queue_size)

    @property
    def tokenizer(self) -> "Tokenizer":
        return self.session.backend.tokenizer

    @property
    def failure(self) -> str | None:
        return self._super.failure

    # --- the consumer's side -------------------------------------------------------------------

    def submit(self, request: EngineRequest) -> Handle:
        if self._super.failure is not None:
            raise EngineFailed(f"the engine stopped: {self._super.failure}", hint="the server exits; restart it")
        if self._closed.is_set():
            raise EngineClosed("the server is shutting down", hint="retry once it is back")
        handle = Handle(request, next(self._ids))
        with self._lock:
            if self._queue.qsize() >= self.queue_size:
                raise QueueFull(self._retry_after())
            self._queue.put(handle)
            self._stats.requests_total += 1
        return handle

    def stats(self) -> EngineStats:
        with self._lock:
            s = dataclasses.replace(self._stats, spec_accepted_per_pos=list(self._stats.spec_accepted_per_pos))
        s.queued = self._queue.qsize()
        s.tokens_per_s = self._speed.rate()
        return s

    def close(self, timeout_s: float = 10.0) -> None:
        """Take no more requests, cancel the waiting ones, let the running one finish within
        timeout_s (then cancel it), and free the target once the worker has left. Idempotent."""
        if self._closed.is_set() and not self._thread.is_alive():
            return
        self._closed.set()
        self._cancel_waiting()
        self._queue.put(_STOP)
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            with self._lock:
                running = self._running
            if running is not None:
                running.cancel()
            self._thread.join(5.0)  # a cancelled answer ends at its next step
        if not self._thread.is_alive():
            self.session.close()

    def _cancel_waiting(self) -> None:
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, Handle):
                item.cancel()
                self._end(item, _cut_short(item.request, [], [], []))

    def _retry_after(self) -> float:
        """Seconds until a slot is likely free: the recent answers' mean time for each one ahead."""
        mean = sum(self._durations) / len(self._durations) if self._durations else 5.0
        return max(1.0, math.ceil(mean * (self._queue.qsize() + 1)))

    # --- the worker's side ---------------------------------------------------------------------

    def _work(self) -> None:
        while (item := self._queue.get()) is not _STOP:
            assert isinstance(item, Handle)
            if item.cancelled:  # its client left while it waited
                self._end(item, _cut_short(item.request, [], [], []))
                continue
            with self._lock:
                self._running = item
                self._stats.active = self._stats.live_sequences = 1
            t0 = time.monotonic()
            try:
                self._end(item, self._answer(item))
            finally:
                with self._lock:
                    self._running = None
                    self._stats.active = self._stats.live_sequences = 0
                    self._durations.append(time.monotonic() - t0)

    def _answer(self, handle: Handle) -> "Finish":
        """Stream one request's answer onto its handle -> its Finish (not yet put)."""
        from homespec.session.responses import Finish, StepFigures, TextDelta
        from homespec.speculative.loop import Limits

        req = handle.request
        steps: list["Step"] = []
        ids: list[int] = []
        parts: list[str] = []
        try:
            stream = self.session.stream(req.prompt_ids, sampler=req.sampler, limits=Limits(max_tokens=req.max_tokens),
                                         stop=req.stop, seed=req.seed)
            for r in stream:
                if isinstance(r, Finish):
                    return r
                if isinstance(r, StepFigures):
                    steps.append(r.step)
                    self._speed.add(len(r.step.tokens))
                elif isinstance(r, TextDelta):
                    ids.extend(r.token_ids)
                    parts.append(r.text)
                handle.put(r)
                if handle.cancelled:
                    stream.close()  # the loop ends between two steps
                    break
        except Exception as e:  # noqa: BLE001 - one request's failure must not stop the server
            # the 500 says the log has the details: the traceback of what was not a HomespecError
            log.error("request %d failed: %s: %s", handle.id, type(e).__name__, e,
                      exc_info=e if not isinstance(e, HomespecError) or os.environ.get("HOMESPEC_DEBUG") else None)
            handle.error = e if isinstance(e, HomespecError) else HomespecError(  # type: ignore[attr-defined]
                f"{type(e).__name__}: {e}", hint="HOMESPEC_DEBUG=1 shows the traceback")
            return _cut_short(req, steps, ids, parts, reason="error")
        return _cut_short(req, steps, ids, parts)

    def _died(self, err: HomespecError) -> None:
        """The worker stopped (homespec.engine.supervise): the running request and every waiting one
        fail now, instead of hanging on a worker that will never take them."""
        self._closed.set()
        with self._lock:
            running, self._running = self._running, None
        if running is not None:
            fail(running, err)
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, Handle):
                fail(item, err)

    def _end(self, handle: Handle, finish: "Finish") -> None:
        with self._lock:
            add_finish(self._stats, finish)
        handle.put(finish)
        handle.end()


def _cut_short(req: EngineRequest, steps: list["Step"], ids: list[int], parts: list[str],
               reason: str = "cancelled") -> "Finish":
    """The Finish of an answer that did not run to its end: what it said so far."""
    from homespec.session.responses import Finish

    prefill_s = steps[0].t_step if steps else 0.0
    return Finish(reason, "".join(parts), tuple(ids), tuple(req.prompt_ids), tuple(steps), prefill_s,
                  sum(s.t_step for s in steps[1:]))
