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


def test_take_returns_what_is_there_and_whether_it_ended():
    h = _handle()
    assert h.take() == ([], False)
    h.put_all(["a", "b"])  # type: ignore[list-item]
    assert h.take() == (["a", "b"], False)
    h.put_all(["c"], last=True)  # type: ignore[list-item]
    assert h.take() == (["c"], True)
    assert h.take() == ([], True)  # the end stays
    assert h.get(timeout=0) is None


def test_on_ready_wakes_after_each_hand_over_and_at_once_when_something_waits():
    h = _handle()
    h.put("early")  # type: ignore[arg-type]
    woken: list[int] = []
    h.on_ready(lambda: woken.append(len(h.take()[0])))
    assert woken == [1]  # "early" was already there
    h.put_all(["x", "y"])  # type: ignore[list-item]
    h.end()
    assert woken == [1, 2, 0]
    h.on_ready(None)
    h.put("late")  # type: ignore[arg-type]
    assert woken == [1, 2, 0]


def test_a_waker_that_fails_does_not_fail_the_engine_side():
    h = _handle()

    def closed_loop() -> None:
        raise RuntimeError("Event loop is closed")

    h.on_ready(closed_loop)
    h.put_all(["a"], last=True)  # type: ignore[list-item]
    assert list(h) == ["a"]
