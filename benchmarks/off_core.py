"""Graph calls on another core: what a GPU target does to the host thread's caches, on a CPU.

Run on the CPU, a llama_decode streams the model's weights through the calling thread's core (llama.cpp's
first compute thread is the caller), so the Python that runs after it starts from empty caches: the first
use of each code path costs 10-40x its idle time (docs/results/2026-12-07/llamacpp/host-step/first-touch.txt).
On a GPU target the device computes while the host thread waits, and its caches stay as they were.
`OffCore` gives the CPU that situation: each graph call runs on a worker thread pinned to another core
(with one compute thread, --threads 1), the caller pinned to the first core and polling until the call
returns, as CUDA's host thread spins on its stream by default; ctypes releases the GIL for the call. What
the host then spends is the same work without the decode's cache traffic on its core (the last-level
cache, shared, still sees it) and without its core falling idle: blocked for a 130 ms step instead, the
first numpy call after it costs ~50 us, as after a 130 ms sleep (first-touch.txt).
"""

from __future__ import annotations

import os
import queue
import threading
import time
from typing import Any, Callable

from benchmarks.harness import usage_error


class OffCore:
    """A worker thread on the last core of this process's affinity that runs the calls handed to it."""

    def __init__(self) -> None:
        cores = sorted(os.sched_getaffinity(0))
        if len(cores) < 2:
            usage_error("--off-core needs two cores", "drop --off-core")
        # the first and the last core: on a machine whose hyper-threads are listed pairwise these can be
        # siblings of one physical core, which share its L1 and L2 (not the case on the 2-core VM measured)
        self.host_core, self.work_core = cores[0], cores[-1]
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._done: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="off-core", daemon=True).start()
        os.sched_setaffinity(0, {self.host_core})  # this (the calling) thread only: Linux pins threads one by one

    def _serve(self) -> None:
        os.sched_setaffinity(0, {self.work_core})
        while True:
            fn, args = self._jobs.get()
            try:
                self._done.put((True, fn(*args)))
            except BaseException as e:  # noqa: BLE001 - handed back to the caller
                self._done.put((False, e))

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """fn(*args) on the worker; the caller polls for it, its core kept busy as a CUDA host thread's is
        while it waits for the device (blocked, an idle core here loses its caches within ~100 ms)."""
        self._jobs.put((fn, args))
        while True:
            try:
                ok, out = self._done.get_nowait()
                break
            except queue.Empty:
                time.sleep(0)  # gives the GIL to the worker, keeps this core running
        if not ok:
            raise out
        return out

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """fn, run on the worker whenever it is called."""
        return lambda *args: self.call(fn, *args)
