"""BatchedEngine: continuous batching of many requests over one llama.cpp target.

One engine thread owns the target. Each step it

1. lets waiting requests take free slots and drops cancelled ones (their cells are freed);
2. asks the guard for a draft depth (homespec.engine.guard) and drafts each decoding sequence's
   tree (or its root alone);
3. fills what is left of the batch (n_batch rows) with prompt chunks of requests still
   prefilling, so a long prompt never stalls the streams already running;
4. runs ONE llama_decode for all of it (backends/llamacpp/multi.py), then verifies, commits
   and streams each sequence's tokens on its own Handle (homespec.engine.running).

    engine = BatchedEngine.open(RunOptions(method="ngram", guard=True), parallel=4, queue_size=16)
    handle = engine.submit(EngineRequest(prompt_ids=ids, max_tokens=64))
    text = final(handle).text
    engine.close()
"""

from __future__ import annotations

import collections
import logging
import math
import threading
import time
from typing import TYPE_CHECKING

from homespec.engine.api import EngineClosed, EngineFailed, EngineRequest, EngineStats, Handle, QueueFull, fail
from homespec.engine.supervise import Supervised
from homespec.errors import HomespecError, UsageError

if TYPE_CHECKING:
    from homespec.backends.base import Tokenizer
    from homespec.engine.load import EngineParts
    from homespec.engine.running import Running
    from homespec.session.options import RunOptions
    from homespec.speculative.loop import Step

log = logging.getLogger("homespec.engine")


class BatchedEngine:
    """An Engine (homespec.engine.api) over `slots` sequences of one llama.cpp target."""

    def __init__(self, parts: "EngineParts", *, queue_size: int, prefill_chunk: int | None = None) -> None:
        self.parts = parts
        self.backend = parts.backend
        self.model_path = parts.model_path
        self.slots = len(parts.drafters)
        self.n_ctx = self.backend.lane_ctx
        self.n_vocab = self.backend.n_vocab  # the server checks prompts of token ids against it
        self.queue_size = queue_size
        self.prefill_chunk = min(prefill_chunk or self.backend.batch_rows, self.backend.batch_rows)
        self.guard = parts.guard
        self._eos = frozenset(self.backend.tokenizer.eos_ids)
        self._cond = threading.Condition()
        self._waiting: collections.deque[Handle] = collections.deque()
        self._running: list["Running"] = []
        self._free = list(range(self.slots))
        self._stats = EngineStats(slots=self.slots)
        if parts.shape is not None:  # accepted at draft position 0 .. depth-1
            self._stats.spec_accepted_per_pos = [0] * parts.shape.depth
        self._rates: collections.deque[tuple[float, int]] = collections.deque(maxlen=64)  # (time, tokens) per step
        self._request_s = 0.0  # EWMA seconds a request holds a slot (the Retry-After estimate)
        self._next_id = 0
        self._delivered: list[Handle] = []  # ended since the last wake-up
        self._closing = False
        self._cancel_all = False
        # the engine thread, watched: if it stops anyway, every request waiting on it fails at once
        self._super = Supervised(self._run, self._died)
        self._thread = self._super.thread
        self._super.start()

    @classmethod
    def open(cls, opt: "RunOptions", *, parallel: int, queue_size: int, prefill_chunk: int | None = None,
             ubatch: int | None = None) -> "BatchedEngine":
        """Plan, load the target with KV for `parallel` sequences of opt.ctx tokens, a drafter per
        sequence and the guard (opt.guard False: drafts always run at full depth). `prefill_chunk`:
        prompt rows per step (default n_batch); `ubatch`: llama.cpp's micro-batch (default the
        plan's; homespec.engine.load.BATCH_INVARIANT_UBATCH for batch-invariant answers)."""
        from homespec.engine.load import open_parts

        if queue_size < 0:
            raise UsageError(f"queue size {queue_size} is negative", hint="pass 0 (no waiting) or more")
        parts = open_parts(opt, parallel, ubatch)
        return cls(parts, queue_size=queue_size, prefill_chunk=prefill_chunk)

    @property
    def tokenizer(self) -> "Tokenizer":
        return self.backend.tokenizer

    @property
    def failure(self) -> str | None:
        return self._super.failure

    # --- consumer side -------------------------------------------------------------------------

    def submit(self, request: EngineRequest) -> Handle:
        n = len(request.prompt_ids)
        if n == 0:
            raise UsageError("the prompt is empty", hint="give a prompt of at least one token")
        if n >= self.n_ctx:
            raise UsageError(f"the prompt has {n} tokens but the context holds {self.n_ctx}",
                                hint="shorten the prompt or start the engine with a larger --ctx")
        if request.max_tokens < 1:
            raise UsageError(f"max_tokens {request.max_tokens} is not positive", hint="ask for 1 token or more")
        with self._cond:
            if self._super.failure is not None:
                raise EngineFailed(f"the engine stopped: {self._super.failure}", hint="the server exits; restart it")
            if self._closing:
                raise EngineClosed("the engine is shutting down", hint="send the request to a running server")
            # requests not yet in a slot beyond the free slots are the ones that wait
            if len(self._waiting) - len(self._free) >= self.queue_size:
                # every request ahead needs a slot first: rounds of `slots` answers, each of the
                # recent mean time (docs/server.md, "Errors")
                rounds = math.ceil((len(self._waiting) + 1) / self.slots)
                raise QueueFull(max(1.0, self._request_s * rounds))
            handle = Handle(request, self._next_id)
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
            out.active, out.queued = len(self._running), len(self._waiting)
            out.tokens_per_s = _rate(self._rates)
            return out

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop taking requests; let running and waiting ones finish within timeout_s, then cancel
        the rest; free the target."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(timeout=max(0.0, timeout_s))
        with self._cond:
            self._cancel_all = True
            self._cond.notify_all()
        self._thread.join()
        self.backend.close()

    # --- the engine thread ---------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            if not self._running:
                self._wake()  # answers that ended last step: no next decode will wake them
            with self._cond:
                while not (self._running or self._waiting or self._closing):
                    self._cond.wait()
                if self._cancel_all:
                    for h in self._waiting:
                        h.cancel()
                if self._closing and not (self._running or self._waiting):
                    return
                if self._cancel_all:
                    for r in self._running:
                        r.handle.cancel()
                self._admit()
            try:
                self._reap()
                if self._running:
                    self._step()
            except Exception as e:  # noqa: BLE001 - the thread must survive to serve the next request
                self._fail(list(self._running), e)

    def _admit(self) -> None:
        """Waiting requests into free slots (called holding the lock)."""
        from homespec.engine.running import Running
        from homespec.session.detok import Detokenizer

        while self._waiting and self._free:
            h = self._waiting.popleft()
            lane = self._free[0]
            drafter = self.parts.drafters[lane]
            try:  # a request that cannot start fails alone, its slot still free
                run = Running(h, lane, drafter if h.request.speculate else None, self._eos, self.n_ctx,
                              Detokenizer(self.tokenizer, h.request.stop), shape0=self.parts.shape)
            except Exception as e:  # noqa: BLE001
                fail(h, _as_error(e, h))
                continue
            self._free.pop(0)
            self._running.append(run)
            self._stats.prompt_tokens_total += len(run.prompt)

    def _reap(self) -> None:
        """Cancelled and finished requests leave: their cells are freed before their Finish is
        put, so a consumer that has read it sees the sequence gone from stats()."""
        gone = []
        for r in list(self._running):
            if r.handle.cancelled and not r.done:
                r.end("cancelled")
            if r.done:
                self._release(r)
                gone.append(r)
        live = self.backend.live_sequences()
        with self._cond:
            self._stats.live_sequences = live
        for r in gone:
            r.deliver()
            self._delivered.append(r.handle)

    def _wake(self) -> None:
        """Wake every consumer with new responses. Called just before llama_decode, which frees
        the interpreter: the consumers' work (the HTTP layer's SSE writes) then runs while the
        engine computes, instead of taking the interpreter from the engine's own Python work
        between decodes (a thread waiting for the GIL waits up to its 5 ms switch interval)."""
        for h in self._delivered:
            h.wake()
        self._delivered.clear()
        for r in self._running:
            r.handle.wake()

    def _release(self, r: "Running") -> None:
        self.backend.free(r.lane)
        with self._cond:
            self._running.remove(r)
            self._free.append(r.lane)
            self._free.sort()
            cancelled = r.reason == "cancelled"
            self._stats.requests_finished += not cancelled
            self._stats.requests_cancelled += cancelled
            held = time.perf_counter() - r.t0
            self._request_s = held if not self._request_s else 0.8 * self._request_s + 0.2 * held

    def _step(self) -> None:
        """One batched target pass: every decoding sequence's tree, then prompt chunks."""
        t0 = time.perf_counter()
        decoding = [r for r in self._running if not r.prefilling]
        prefilling = [r for r in self._running if r.prefilling]
        work, owners = [], []
        try:
            rows = self._plan_rows(decoding, prefilling)
            depth = self.guard.choose(len(decoding), rows) if self.guard is not None and decoding else 0
            for r in decoding:
                try:  # a request whose draft fails is failed alone and left out of this step
                    work.append(r.draft(depth if r.drafter is not None else 0, self.backend))
                except Exception as e:  # noqa: BLE001
                    self._fail_one(r, e)
                    continue
                owners.append(r)
            budget = min(self.prefill_chunk, max(1, self.backend.batch_rows - sum(len(w.tokens) for w in work)))
            for r in prefilling:
                chunk = r.prefill_chunk(budget)
                if chunk is not None:
                    budget -= len(chunk.tokens)
                    work.append(chunk)
                    owners.append(r)
            if not work:  # every decoding request failed its draft: nothing to decode this step
                self._reap()
                return
            self._wake()
            t1 = time.perf_counter()
            outs = self.backend.decode(work)
            t_verify = time.perf_counter() - t1
            n_rows = sum(len(w.tokens) for w in work)
            if self.guard is not None:
                self.guard.record_pass(n_rows, t_verify)
            steps = self._finish_step(owners, outs, t_verify, time.perf_counter() - t0)
            if self.guard is not None and depth > 0:
                spec = [s for s in steps if s.speculative]
                drafting = sum(s.t_draft for s in spec)
                self.guard.record_step(len(spec), rows, sum(len(s.tokens) for s in spec), t_verify + drafting)
        except Exception as e:  # noqa: BLE001 - one failed step fails its requests, not the engine
            self._fail(owners or self._running, e)
            return
        self._count(steps, n_rows)
        self._reap()

    def _plan_rows(self, decoding: list["Running"], prefilling: list["Running"]) -> int:
        """Rows of prompt chunks this step will carry beside the decoding sequences' trees."""
        left = sum(len(r.prompt) - r.fed for r in prefilling)
        return min(left, self.prefill_chunk, max(0, self.backend.batch_rows - len(decoding)))

    def _finish_step(self, owners: list["Running"], outs, t_verify: float, t_step: float) -> list["Step"]:
        steps = []
        for r, fwd in zip(owners, outs):
            try:  # one request's verification failing fails that request alone
                if r.tree is not None:  # decoding: verify, commit, emit
                    step = r.verified(fwd, self.backend, t_verify, t_step)
                    steps.append(step)
                    if self.guard is not None and step.draft_size > 0:
                        self.guard.record_draft(step.draft_size, step.accepted, r.depth, step.t_draft)
                else:
                    before = len(r.steps)
                    r.prefilled(fwd, self.backend, t_verify, t_step)
                    steps.extend(r.steps[before:])
            except Exception as e:  # noqa: BLE001
                self._fail_one(r, e)
        return steps

    def _count(self, steps: list["Step"], n_rows: int) -> None:
        tokens = sum(len(s.tokens) for s in steps)
        with self._cond:
            st = self._stats
            st.target_passes_total += 1
            st.generation_tokens_total += tokens
            for s in steps:
                if s.speculative and s.draft_size > 0:
                    st.spec_num_drafts += 1
                    st.spec_num_draft_tokens += s.draft_size
                    st.spec_num_accepted_tokens += s.accepted
                    while len(st.spec_accepted_per_pos) < s.accepted:
                        st.spec_accepted_per_pos.append(0)
                    for i in range(s.accepted):
                        st.spec_accepted_per_pos[i] += 1
            self._rates.append((time.perf_counter(), tokens))

    def _fail(self, runs: list["Running"], e: Exception) -> None:
        """A failure of the whole step (llama_decode itself): the requests in it fail; the engine
        goes on with the next step."""
        for r in list(runs):
            self._fail_one(r, e)
        self._reap()

    def _fail_one(self, r: "Running", e: Exception) -> None:
        """One request's failure: it ends with its error at the next reap; its neighbours go on."""
        r.handle.error = _as_error(e, r.handle)
        r.end(None)

    def _died(self, err: HomespecError) -> None:
        """The engine thread stopped (homespec.engine.supervise): every request still waiting or
        running fails now, instead of hanging on a thread that will never step again."""
        with self._cond:
            self._closing = True
            waiting, running = list(self._waiting), list(self._running)
            self._waiting.clear()
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


def _as_error(e: Exception, handle: Handle) -> HomespecError:
    """A request's failure as the HomespecError its handle carries; an unexpected one is logged with
    its traceback (the 500's message says the log has the details)."""
    if isinstance(e, HomespecError):
        return e
    log.error("request %d failed: %s: %s", handle.id, type(e).__name__, e, exc_info=e)
    return HomespecError(f"{type(e).__name__}: {e}", hint="the server's log has the traceback")


def _rate(rates: "collections.deque[tuple[float, int]]", window_s: float = 5.0) -> float:
    """Generation tokens per second over the last steps (0 when idle)."""
    now = time.perf_counter()
    recent = [(t, n) for t, n in rates if now - t <= window_s]
    if len(recent) < 2:
        return 0.0
    span = now - recent[0][0]
    return sum(n for _, n in recent[1:]) / span if span > 0 else 0.0
