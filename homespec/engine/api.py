"""What the engine takes and gives back: the seam between the scheduler and its consumers.

A consumer (the HTTP server, a benchmark) builds an EngineRequest from token ids, submits it,
and reads the request's Handle: the same Response records Session.stream yields (StepFigures,
TextDelta, ..., then one Finish), produced on the engine's own thread. `cancel()` (a client that
went away) frees the request's sequence at the engine's next step; the stream then ends with a
Finish whose reason is "cancelled". A request the engine could not finish ends with a Finish
whose reason is None and `handle.error` set (a HomespecError: message and hint).

    handle = engine.submit(EngineRequest(prompt_ids=ids, max_tokens=64))
    for r in handle:            # blocks between responses
        ...
"""

from __future__ import annotations

import collections
import logging
import os
import queue
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from homespec.engine.responses import Finish
from homespec.errors import HomespecError

log = logging.getLogger("homespec.engine")

if TYPE_CHECKING:
    from homespec.engine.responses import Response
    from homespec.grammar import Grammar
    from homespec.speculative.sampling import Sampler


class QueueFull(HomespecError):
    """Every slot is busy and the waiting queue is full: answer 503 with Retry-After."""

    def __init__(self, retry_after_s: float, hint: str = "retry later, or start the server with more --parallel slots"):
        super().__init__(f"the server is busy (retry in {retry_after_s:.0f} s)", hint=hint)
        self.retry_after_s = retry_after_s


class EngineClosed(HomespecError):
    """The engine is shutting down and takes no new request."""


class EngineFailed(HomespecError):
    """The engine's thread has stopped on an error it could not pin on one request: no request can
    be answered any more (the server answers 503 and exits non-zero; docs/server.md, "Errors")."""


@dataclass(frozen=True, slots=True)
class EngineRequest:
    prompt_ids: tuple[int, ...]
    max_tokens: int
    sampler: "Sampler | None" = None  # None = greedy
    stop: tuple[str, ...] = ()
    seed: int = 0
    speculate: bool = True  # False: this request decodes plainly whatever the guard says
    cache_prompt: bool = True  # False: start from an empty cache (llama-server's cache_prompt)
    grammar: "Grammar | None" = None  # decode under this grammar (structured output, a forced tool call)
    logprobs: int | None = None  # score each emitted token, with this many alternatives (None: not at all)


@dataclass
class EngineStats:
    """Counters since the engine started (Prometheus counters) and gauges (now)."""

    active: int = 0  # sequences being decoded
    queued: int = 0  # requests waiting for a slot
    slots: int = 1
    requests_total: int = 0
    requests_finished: int = 0
    requests_cancelled: int = 0
    prompt_tokens_total: int = 0
    generation_tokens_total: int = 0
    target_passes_total: int = 0  # batched target passes (one per engine step)
    spec_num_drafts: int = 0  # sequence-steps that verified a draft
    spec_num_draft_tokens: int = 0  # draft tokens proposed
    spec_num_accepted_tokens: int = 0  # draft tokens accepted
    spec_accepted_per_pos: list[int] = field(default_factory=list)  # accepted at draft position 0, 1, ...
    tokens_per_s: float = 0.0  # total generation speed over the last steps
    live_sequences: int = 0  # lanes holding a request (0 when idle: nothing leaked)
    prompt_tokens_reused_total: int = 0  # prompt tokens found in a lane's cache, not prefilled
    prompt_tokens_prefilled_total: int = 0  # prompt tokens the target processed
    cached_tokens: int = 0  # tokens held in the lanes' caches now (kept for the next request)
    host_cache_bytes: int = 0  # --cache-ram: idle conversations' states held in host RAM
    host_cache_entries: int = 0
    host_cache_saves: int = 0  # lane states saved there
    host_cache_loads: int = 0  # ... and put back into a lane
    # per drafter ("ngram", "suffix", "eagle3", ...): [drafts, draft tokens, accepted tokens]
    spec_by_drafter: dict[str, list[int]] = field(default_factory=dict)


class Handle:
    """One request's stream: the engine puts responses in, the consumer iterates them out."""

    _END = object()

    def __init__(self, request: EngineRequest, request_id: int) -> None:
        self.request = request
        self.id = request_id
        # responses not yet read; the end marker stays at the front once reached
        self._items: collections.deque[object] = collections.deque()
        self._ready = threading.Condition()
        self._cancelled = threading.Event()
        self._waker: Callable[[], None] | None = None
        self._unwoken = False  # responses put without a wake-up yet
        self.on_cancel: Callable[["Handle"], None] | None = None  # the engine's: a waiting request leaves at once
        self.error: HomespecError | None = None  # set before the end when the engine failed this request

    # engine side
    def put(self, response: "Response") -> None:
        self.put_all((response,))

    def put_all(self, responses: "Iterable[Response]", *, last: bool = False, wake: bool = True) -> None:
        """Several responses at once (`last`: and the end): the consumer is woken once for all of
        them (a wake-up is a thread switch, the dearest thing a step does per sequence on a busy CPU).
        `wake=False`: hold the wake-up until `wake()` (the batching engine wakes every consumer
        just before its next llama_decode, so their work runs while it computes)."""
        with self._ready:
            self._items.extend(responses)
            if last:
                self._items.append(self._END)
            self._unwoken = True
        if wake:
            self.wake()

    def wake(self) -> None:
        """Wake the consumer if responses came since the last wake-up (cheap when none did)."""
        with self._ready:
            if not self._unwoken:
                return
            self._unwoken = False
            self._ready.notify_all()
            waker = self._waker
        if waker is not None:
            try:
                waker()
            except Exception:  # noqa: BLE001 - a consumer's loop that has closed must not fail the engine
                pass

    def end(self) -> None:
        self.put_all((), last=True)

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    # consumer side
    def cancel(self) -> None:
        """Drop this request (safe from any thread, and more than once): one still waiting for a slot
        leaves the queue now; a running one leaves its slot at the engine's next step."""
        if self._cancelled.is_set():
            return
        self._cancelled.set()
        if self.on_cancel is not None:
            self.on_cancel(self)

    def get(self, timeout: float | None = None) -> "Response | None":
        """The next response, or None once the stream has ended. queue.Empty after `timeout`."""
        with self._ready:
            if not self._ready.wait_for(lambda: self._items, timeout):
                raise queue.Empty
            if self._items[0] is self._END:  # left in place: later calls see the end too
                return None
            return self._items.popleft()  # type: ignore[return-value]

    def on_ready(self, waker: Callable[[], None] | None) -> None:
        """Call `waker` (on the engine's thread) after each hand-over, and once now if something
        is already there: how an event loop follows a handle without a thread blocked in get()
        (`waker` should only schedule work, e.g. loop.call_soon_threadsafe(event.set))."""
        with self._ready:
            self._waker = waker
            pending = bool(self._items)
        if waker is not None and pending:
            waker()

    def take(self) -> tuple[list["Response"], bool]:
        """Everything handed over so far, without waiting -> (responses, ended)."""
        with self._ready:
            out: list[Response] = []
            while self._items and self._items[0] is not self._END:
                out.append(self._items.popleft())  # type: ignore[arg-type]
            return out, bool(self._items)

    def __iter__(self) -> Iterator["Response"]:
        while (item := self.get()) is not None:
            yield item


def fail(handle: Handle, error: HomespecError) -> None:
    """End a request that the engine could not answer: `handle.error`, a Finish with no reason and
    what was said so far (nothing), and the end. For a request that never reached a slot."""
    handle.error = error
    handle.put_all((Finish(None, "", (), tuple(handle.request.prompt_ids), (), 0.0, 0.0),), last=True)


def as_error(e: Exception, handle: Handle) -> HomespecError:
    """A request's failure as the HomespecError its handle carries. An unexpected one is logged with
    its traceback where a log is kept (serve's stderr log; HOMESPEC_DEBUG=1 anywhere); a command
    that steps the engine itself prints the error line alone."""
    if isinstance(e, HomespecError):
        return e
    if log.hasHandlers() or os.environ.get("HOMESPEC_DEBUG"):
        log.error("request %d failed: %s: %s", handle.id, type(e).__name__, e, exc_info=e)
    return HomespecError(f"{type(e).__name__}: {e}", hint="the log has the traceback (HOMESPEC_DEBUG=1 shows it)")
