"""benchmarks/off_core.py: a call handed to the worker runs on another core, returns its result or
raises its error in the caller, and the caller stays on its own core."""

from __future__ import annotations

import os
import threading

import pytest


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_calls_run_on_the_other_core_and_come_back():
    from benchmarks.off_core import OffCore

    before = os.sched_getaffinity(0)
    result: dict = {}

    def body() -> None:  # a thread of its own: OffCore pins the thread that makes it
        off = OffCore()
        where = off.call(lambda: (threading.current_thread().name, os.sched_getaffinity(0)))
        result["worker"] = where
        result["host"] = os.sched_getaffinity(0)
        result["sum"] = off.wrap(lambda a, b: a + b)(2, 3)
        with pytest.raises(ZeroDivisionError):
            off.call(lambda: 1 / 0)
        result["cores"] = (off.host_core, off.work_core)

    t = threading.Thread(target=body)
    t.start()
    t.join()
    host, work = result["cores"]
    assert host != work and {host, work} <= before
    assert result["worker"] == ("off-core", {work}) and result["host"] == {host} and result["sum"] == 5
    assert os.sched_getaffinity(0) == before  # this thread was not pinned
