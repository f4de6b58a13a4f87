"""Handle: a request's stream between the engine thread and its consumer."""

from __future__ import annotations

import queue
import threading

import pytest

from homespec.engine.api import EngineRequest, Handle


def _handle() -> Handle:
    return Handle(EngineRequest(prompt_ids=(1, 2, 3), max_tokens=4), 0)


def test_put_all_keeps_order_and_the_end_stays():
    h = _handle()
    h.put("a")  # type: ignore[arg-type] - any object travels; the engine puts Responses
    h.put_all(["b", "c"])  # type: ignore[list-item]
    h.put_all(["d"], last=True)  # type: ignore[list-item]
    assert list(h) == ["a", "b", "c", "d"]
    assert h.get(timeout=0) is None  # later calls see the end too
    assert h.get() is None


def test_get_times_out_while_nothing_is_there():
    h = _handle()
    with pytest.raises(queue.Empty):
        h.get(timeout=0.01)


def test_a_waiting_consumer_gets_what_another_thread_puts():
    h = _handle()
    got: list[object] = []
    t = threading.Thread(target=lambda: got.extend(h))
    t.start()
    h.put_all(["x", "y"])  # type: ignore[list-item]
    h.end()
    t.join(timeout=10)
    assert not t.is_alive()
    assert got == ["x", "y"]
