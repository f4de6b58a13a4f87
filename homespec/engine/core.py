"""Engine: one loaded target, its lanes, the requests waiting for them, and the step that runs them.

Every command decodes here: `homespec serve` with N lanes on the engine's own thread
(`start()`), chat, generate and bench with one lane, stepping it themselves (`step()`, through
Session.stream). Each step

1. lets waiting requests take free lanes: the lane whose cache shares the longest prefix with the
   prompt, cut to what it can reuse (homespec.engine.reuse); cancelled requests leave;
2. runs one pass for every lane (homespec.engine.step): drafts, prompt chunks, verification;
3. hands each request its responses, and records what each finished one left in its lane.

    engine = Engine.open(RunOptions(method="ngram", guard=True), parallel=4, queue_size=16).start()
    handle = engine.submit(EngineRequest(prompt_ids=ids, max_tokens=64))
    text = final(handle).text
    engine.close()
"""

from __future__ import annotations

import collections
import logging
import math
import sys
import threading
import time
from typing import TYPE_CHECKING, Iterator

from homespec.engine.api import (
    EngineClosed, EngineFailed, EngineRequest, EngineStats, Handle, QueueFull, as_error, fail,
)
from homespec.engine.assemble import prepare
from homespec.engine.detok import Detokenizer
from homespec.engine.host_cache import MIN_GAIN, MIN_SAVE, HostCache, Saved
from homespec.engine.responses import Finish
from homespec.engine.reuse import Lane, choose_lane, keep_for, reuse
from homespec.engine.running import Running
from homespec.engine.setup import set_up
from homespec.engine.step import run_step
from homespec.engine.supervise import Supervised
from homespec.engine.tally import add_steps
from homespec.errors import HomespecError, UsageError

if TYPE_CHECKING:
    from homespec.contracts.backend import Tokenizer
    from homespec.engine.assemble import RunParts
    from homespec.engine.options import RunOptions
    from homespec.engine.responses import Response
    from homespec.engine.running import Running
    from homespec.engine.setup import RunSetup

log = logging.getLogger("homespec.engine")


class Engine:
    """A scheduler over the lanes of one loaded target (RunParts). Thread-safe: submit, stats,
    slots and close from any thread; step from one (the engine's thread, or the caller's)."""

    def __init__(self, parts: "RunParts", *, queue_size: int, prefill_chunk: int | None = None,
                 cache_prompt: bool = True, cache_ram: int = 0) -> None:
        self.parts = parts
        self.target = parts.target
        self.model_path = parts.model_path
        self.slots = parts.target.lanes
        self.lane_ctx = parts.target.lane_ctx
        self.n_vocab = parts.target.n_vocab  # the server checks prompts of token ids against it
        self.queue_size = queue_size
        self.cache_prompt = cache_prompt  # False: every request starts from an empty cache
        self.prefill_chunk = min(prefill_chunk or self.target.batch_rows, self.target.batch_rows)
        self.guard = parts.guard
        # --cache-ram: idle conversations' states in host RAM (engine/host_cache.py), where the
        # target can save them (llama.cpp)
        self.host = HostCache(cache_ram) if cache_ram > 0 and getattr(self.target, "can_save", False) else None
        self._eos = frozenset(self.target.tokenizer.eos_ids) if parts.stop_at_eos else frozenset()
        self._cond = threading.Condition()
        self._waiting: collections.deque[Handle] = collections.deque()
        self._lanes = [Lane(i, d) for i, d in enumerate(parts.drafters)]
        self._stats = EngineStats(slots=self.slots)
        if parts.shape is not None:  # accepted at draft position 0 .. depth-1
            self._stats.spec_accepted_per_pos = [0] * parts.shape.depth
        self._rates: collections.deque[tuple[float, int]] = collections.deque(maxlen=64)  # (time, tokens) per step
        self._request_s = 0.0  # EWMA seconds a request holds a lane (the Retry-After estimate)
        self._next_id = 0
        self._delivered: list[Handle] = []  # ended since the last wake-up
        self._closing = False
        self._cancel_all = False
        self._thread: threading.Thread | None = None
        self._super: Supervised | None = None  # the engine's own thread, watched (start())

    @classmethod
    def open(cls, opt: "RunOptions", *, parallel: int | None = 1, queue_size: int = 32,
             prefill_chunk: int | None = None, ubatch: int | None = None, cache_prompt: bool = True,
             cache_ram: int = 0) -> "Engine":
        """Check and plan once (homespec.engine.setup.set_up: `parallel` None lets the plan choose the
        lanes), then open the engine that set-up describes (Engine.from_setup)."""
        return cls.from_setup(set_up(opt, parallel=parallel), queue_size=queue_size, prefill_chunk=prefill_chunk,
                              ubatch=ubatch, cache_prompt=cache_prompt, cache_ram=cache_ram)

    @classmethod
    def from_setup(cls, setup: "RunSetup", *, queue_size: int = 32, prefill_chunk: int | None = None,
                   ubatch: int | None = None, cache_prompt: bool = True, cache_ram: int = 0) -> "Engine":
        """Load the target with KV for setup.parallel lanes of setup.lane_ctx tokens, a drafter per
        lane and the guard (homespec.engine.assemble.prepare)."""
        if queue_size < 0:
            raise UsageError(f"queue size {queue_size} is negative", hint="pass 0 (no waiting) or more")
        parts = prepare(setup, ubatch=ubatch)
        return cls(parts, queue_size=queue_size, prefill_chunk=prefill_chunk, cache_prompt=cache_prompt,
                   cache_ram=cache_ram)

    @property
    def tokenizer(self) -> "Tokenizer":
        return self.target.tokenizer

    @property
    def failure(self) -> str | None:
        """Why the engine's thread stopped (None while it serves): /health answers 503 with it."""
        return self._super.failure if self._super is not None else None

    # --- consumer side -------------------------------------------------------------------------

    def submit(self, request: EngineRequest) -> Handle:
        n = len(request.prompt_ids)
        if n == 0:
            raise UsageError("the prompt is empty", hint="give a prompt of at least one token")
        if n >= self.lane_ctx:
            raise UsageError(f"the prompt has {n} tokens but the context holds {self.lane_ctx}",
                             hint="shorten the prompt or start with a larger --ctx")
        if request.max_tokens < 1:
            raise UsageError(f"max_tokens {request.max_tokens} is not positive", hint="ask for 1 token or more")
        with self._cond:
            if self.failure is not None:
                raise EngineFailed(f"the engine stopped: {self.failure}", hint="the server exits; restart it")
            if self._closing:
                raise EngineClosed("the engine is shutting down", hint="send the request to a running server")
            free = sum(lane.running is None for lane in self._lanes)
            if len(self._waiting) - free >= self.queue_size:  # beyond the free lanes, requests wait
                raise QueueFull(self._retry_after())
            handle = Handle(request, self._next_id)
            handle.on_cancel = self._withdraw
            self._next_id += 1
            self._waiting.append(handle)
            self._stats.requests_total += 1
            self._cond.notify_all()
        return handle

    def stats(self) -> EngineStats:
        with self._cond:
            s = self._stats
            out = EngineStats(**{k: getattr(s, k) for k in s.__dataclass_fields__})
            out.spec_accepted_per_pos = list(s.spec_accepted_per_pos)
            out.spec_by_drafter = {d: list(v) for d, v in s.spec_by_drafter.items()}
            busy = [lane for lane in self._lanes if lane.running is not None]
            out.active, out.queued = len(busy), len(self._waiting)
            out.live_sequences = len(busy)
            out.cached_tokens = sum(len(lane.cached) for lane in self._lanes)
            if self.host is not None:
                out.host_cache_bytes, out.host_cache_entries = self.host.nbytes, len(self.host.entries)
                out.host_cache_saves, out.host_cache_loads = self.host.saves, self.host.loads
            out.tokens_per_s = _rate(self._rates)
            return out

    def slots_info(self) -> list[dict]:
        """Each lane as llama-server's /slots shows a slot: id, whether it is processing, its cache."""
        with self._cond:
            return [{"id": lane.index, "is_processing": lane.running is not None,
                     "n_cached": len(lane.running.cached) if lane.running is not None else len(lane.cached),
                     "id_task": lane.running.handle.id if lane.running is not None else None,
                     "n_prompt_tokens": len(lane.running.prompt) if lane.running is not None else None}
                    for lane in self._lanes]

    @property
    def idle(self) -> bool:
        with self._cond:
            return not self._waiting and all(lane.running is None for lane in self._lanes)

    def start(self) -> "Engine":
        """Run the engine on its own thread (a server), watched: should it stop anyway, every
        waiting request fails at once (homespec.engine.supervise). Without it the caller steps."""
        # OpenMP keeps its thread count per thread: where torch runs (a torch target and its head), the
        # engine's thread takes the caller's torch threads. Asked of torch only where it is loaded: the
        # GGUF path never imports it.
        torch = sys.modules.get("torch")
        threads = torch.get_num_threads() if torch is not None else None
        self._super = Supervised(lambda: self._run(threads), self._died)
        self._thread = self._super.thread
        self._super.start()
        return self

    def stop_taking(self) -> None:
        """Take no new request (a server that is shutting down): the running and waiting ones go on."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()

    def cancel_all(self) -> None:
        """End every answer now: waiting ones leave at once, running ones at the next step, each with
        the reason "cancelled" (a server's clients are told it is shutting down). Takes no new one."""
        with self._cond:
            self._closing = True
            self._cancel_all = True
            self._cond.notify_all()
            waiting = list(self._waiting)
        for h in waiting:
            h.cancel()

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop taking requests; let running and waiting ones finish within timeout_s, then cancel
        the rest; free the target."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=max(0.0, timeout_s))
        with self._cond:
            self._cancel_all = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
        else:
            while not self.idle:
                self.step()
        self.parts.close()

    # --- stepping -------------------------------------------------------------------------------

    def _run(self, torch_threads: int | None) -> None:
        if torch_threads is not None:
            sys.modules["torch"].set_num_threads(torch_threads)
        while True:
            if not self._busy():
                self._wake()  # answers that ended last step: no next pass will wake them
            with self._cond:
                while not (self._busy() or self._waiting or self._closing):
                    self._cond.wait()
                if self._closing and not (self._busy() or self._waiting):
                    return
            self.step()

    def step(self) -> None:
        """Admit, run one pass, hand out what it produced. Never raises for a request's failure:
        the requests of a failed pass get their error and the engine goes on."""
        with self._cond:
            if self._cancel_all:
                for h in list(self._waiting):  # each leaves the queue as it is cancelled
                    h.cancel()
                for lane in self._lanes:
                    if lane.running is not None:
                        lane.running.handle.cancel()
        running: list["Running"] = []
        try:
            self._admit()
            self._reap()
            running = [lane.running for lane in self._lanes if lane.running is not None]
            if running:
                out = run_step(self.target, running, self.guard, prefill_chunk=self.prefill_chunk,
                               before_pass=self._wake)
                self._count(out.steps)
                self._checkpoint(running)
        except Exception as e:  # noqa: BLE001 - one failed pass fails its requests, not the engine
            self._fail(running, e)
        self._reap()
        if self._thread is None or not self._busy():
            self._wake()  # stepped by its caller (or idle now): nothing else would wake the ended answers

    def _busy(self) -> bool:
        return any(lane.running is not None for lane in self._lanes)

    def _admit(self) -> None:
        """Waiting requests into free lanes, each into the lane that can reuse most of its prompt."""
        while True:
            with self._cond:
                free = [lane for lane in self._lanes if lane.running is None]
                if not (self._waiting and free):
                    return
                h = self._waiting.popleft()
            if h.cancelled:
                self._end_unstarted(h)
                continue
            req = h.request
            enabled = self.cache_prompt and req.cache_prompt
            lane = choose_lane(free, req.prompt_ids)
            try:  # a request that cannot start fails alone, its lane emptied and free
                if self.host is not None and enabled:
                    lane = self._through_host(lane, free, req.prompt_ids)
                drafter = lane.drafter if req.speculate else None
                kept = reuse(self.target, lane, req.prompt_ids, drafter=drafter, enabled=enabled)
                detok = Detokenizer(self.tokenizer, req.stop) if self.parts.text else None
                run = Running(h, lane.index, drafter, self._eos, self.lane_ctx, detok, shape0=self.parts.shape,
                              kept=kept)
            except Exception as e:  # noqa: BLE001
                self._forget(lane)
                fail(h, as_error(e, h))
                continue
            with self._cond:
                lane.running = run
                self._stats.prompt_tokens_total += len(run.prompt)
                self._stats.prompt_tokens_reused_total += kept
                self._stats.prompt_tokens_prefilled_total += len(run.prompt) - kept

    # --- host RAM (--cache-ram) -----------------------------------------------------------------

    def _through_host(self, lane: Lane, free: list[Lane], prompt) -> Lane:
        """Before `lane` takes `prompt`: save what it would throw away, or, when a saved
        conversation shares more with `prompt` than any free lane, load it into the free lane with
        least to lose -> the lane the request takes."""
        assert self.host is not None
        found = self.host.best(prompt)
        if found is not None and keep_for(found[0].tokens, prompt) >= keep_for(lane.cached, prompt) + MIN_GAIN:
            lane = min(free, key=lambda ln: (len(ln.cached), ln.last_used))
            self._stash(lane)
            self._unstash(lane, found[0])
        elif len(lane.cached) - keep_for(lane.cached, prompt) >= MIN_SAVE:
            self._stash(lane)
        return lane

    def _stash(self, lane: Lane) -> None:
        """Save the lane's conversation to host RAM, if it holds one worth keeping."""
        if len(lane.cached) < MIN_SAVE:
            return
        snap, dlen = None, 0
        if lane.drafter is not None and hasattr(lane.drafter, "snapshot") and lane.drafter_len:
            dlen, snap = lane.drafter.snapshot(lane.drafter_len)
        elif lane.drafter is not None and not hasattr(lane.drafter, "snapshot"):
            dlen = lane.drafter_len if lane.drafter.trim(lane.drafter_len) == lane.drafter_len else 0
        self.host.put(Saved(list(lane.cached), self.target.save_state(lane.index), snap, dlen, list(lane.checkpoints)))

    def _unstash(self, lane: Lane, saved: Saved) -> None:
        """Load a saved conversation into `lane` (on a refusal the lane is simply empty)."""
        self.host.take(saved)
        lane.checkpoints = []
        if not self.target.load_state(lane.index, saved.state, len(saved.tokens)):
            lane.cached, lane.drafter_len = [], 0
            return
        lane.cached, lane.checkpoints = list(saved.tokens), list(saved.checkpoints)
        lane.drafter_len = 0
        if lane.drafter is not None:
            lane.drafter.reset()
            if saved.drafter is not None and hasattr(lane.drafter, "restore"):
                lane.drafter_len = lane.drafter.restore(saved.drafter)
            elif saved.drafter is None and not hasattr(lane.drafter, "snapshot"):
                lane.drafter_len = saved.drafter_len  # a drafter with no state of its own

    def _checkpoint(self, running: list["Running"]) -> None:
        """Lanes whose prompt went in this step: keep where a later prompt can resume from, where
        the memory cannot be cut anywhere (engine/reuse.py)."""
        fn = getattr(self.target, "checkpoint", None)
        for r in running:
            if r.just_prefilled:
                r.just_prefilled = False
                cp = fn(r.lane) if fn is not None and not r.done else None
                if cp is not None:
                    self._lanes[r.lane].add_checkpoint(*cp)

    def _withdraw(self, h: Handle) -> None:
        """A request cancelled while it waits (its client left): out of the queue now, its place free
        for the next (a queue that kept it until a slot came would answer 503 with no one waiting)."""
        with self._cond:
            try:
                self._waiting.remove(h)
            except ValueError:
                return  # already admitted (the step reaps it) or already ended
        self._end_unstarted(h)

    def _end_unstarted(self, h: Handle) -> None:
        """A request cancelled before it took a lane: an empty answer, reason "cancelled"."""
        h.put_all((Finish("cancelled", "", (), tuple(h.request.prompt_ids), (), 0.0, 0.0),), last=True)
        with self._cond:
            self._stats.requests_cancelled += 1

    def _reap(self) -> None:
        """Cancelled and finished requests leave their lanes; then their Finish is put."""
        for lane in self._lanes:
            r = lane.running
            if r is None:
                continue
            if r.handle.cancelled and not r.done:
                r.end("cancelled")
            if not r.done:
                continue
            failed = r.reason is None
            if failed:
                self.target.free(lane.index)
            with self._cond:
                lane.leave(r, failed=failed)
                cancelled = r.reason == "cancelled"
                self._stats.requests_finished += not cancelled
                self._stats.requests_cancelled += cancelled
                held = time.perf_counter() - r.t0
                self._request_s = held if not self._request_s else 0.8 * self._request_s + 0.2 * held
            r.deliver()
            self._delivered.append(r.handle)

    def _wake(self) -> None:
        """Wake every consumer with new responses, just before the target pass: their work (a
        server's SSE writes) then runs while the target computes."""
        for h in self._delivered:
            h.wake()
        self._delivered.clear()
        for lane in self._lanes:
            if lane.running is not None:
                lane.running.handle.wake()

    def _count(self, steps) -> None:
        tokens = sum(len(s.tokens) for s in steps)
        with self._cond:
            st = self._stats
            st.target_passes_total += 1
            st.generation_tokens_total += tokens
            add_steps(st, steps)
            self._rates.append((time.perf_counter(), tokens))

    def _fail(self, runs: list["Running"], e: Exception) -> None:
        """A failure of the whole pass (the target itself): the requests in it fail; the engine goes
        on with the next step. One request's own failure fails it alone (engine/step.py)."""
        for r in runs:
            if not r.done:
                r.handle.error = as_error(e, r.handle)
                r.end(None)

    def _forget(self, lane: Lane) -> None:
        """A lane whose state is not trusted any more: its cache and its drafter's state go."""
        lane.cached, lane.drafter_len = [], 0
        if lane.drafter is not None:
            lane.drafter.reset()
        try:
            self.target.free(lane.index)
        except Exception:  # noqa: BLE001 - the next request's reuse() frees it again
            log.warning("freeing lane %d failed", lane.index, exc_info=True)

    def _died(self, err: HomespecError) -> None:
        """The engine's thread stopped (homespec.engine.supervise): every request still waiting or
        running fails now, instead of hanging on a thread that will never step again."""
        with self._cond:
            self._closing = True
            waiting = list(self._waiting)
            self._waiting.clear()
            running = [lane.running for lane in self._lanes if lane.running is not None]
        for h in waiting:
            fail(h, err)
        for r in running:
            r.handle.error = err
            try:
                r.end(None)
                r.deliver()
            except Exception:  # noqa: BLE001 - its responses may be half-made; end the stream anyway
                r.handle.end()
            r.handle.wake()

    def _retry_after(self) -> float:
        """Seconds until a waiting request would start: every request ahead needs a lane first,
        rounds of `slots` answers each of the recent mean time (called holding the lock)."""
        rounds = math.ceil((len(self._waiting) + 1) / max(1, self.slots))
        return max(1.0, (self._request_s or 5.0) * rounds)


def follow(engine: Engine, handle: Handle) -> Iterator[Response]:
    """Step `engine` on this thread until `handle`'s answer ends, yielding its responses as they
    come. A failed answer raises its error (the CLI prints it) instead of ending with a Finish;
    leaving early cancels the answer and steps once more, so its lane is free for the next."""
    ended = False
    try:
        while True:
            items, ended = handle.take()
            for r in items:
                if isinstance(r, Finish) and r.finish is None and handle.error is not None:
                    raise handle.error
                yield r
            if ended:
                return
            engine.step()
    finally:
        if not ended:
            handle.cancel()
            while not handle.take()[1]:
                engine.step()


def _rate(rates: "collections.deque[tuple[float, int]]", window_s: float = 5.0) -> float:
    """Generation tokens per second over the last steps (0 when idle)."""
    now = time.perf_counter()
    recent = [(t, n) for t, n in rates if now - t <= window_s]
    if len(recent) < 2:
        return 0.0
    span = now - recent[0][0]
    return sum(n for _, n in recent[1:]) / span if span > 0 else 0.0
