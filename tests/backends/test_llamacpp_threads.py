"""backends/llamacpp/threads.py: each decode's thread count is the fastest measured, re-measured
within its time share, and the backend decodes the same tokens whatever count it picks."""

from __future__ import annotations

from homespec.backends.llamacpp.threads import EXPLORE_SHARE, MAX_WAIT_S, ThreadTuner, candidates, kind


def test_candidates_halve_down_to_one():
    assert candidates(8) == (8, 4, 2, 1)
    assert candidates(6) == (6, 3, 1)
    assert candidates(2) == (2, 1)
    assert candidates(1) == (1,)


def test_kinds_of_decode():
    assert [kind(n) for n in (1, 2, 16, 17, 512)] == [0, 1, 1, 2, 2]


def _drive(tuner: ThreadTuner, cost: dict[int, float], steps: int, t: float = 0.0) -> tuple[list[int], float]:
    """One-row decodes whose time per count is `cost` -> (counts picked, clock at the end)."""
    picked = []
    for _ in range(steps):
        n = tuner.pick(1, now=t)
        tuner.record(1, n, cost[n], now=t)
        picked.append(n)
        t += cost[n]
    return picked, t


def test_busy_cores_move_to_fewer_threads_and_spend_little_re_measuring():
    tuner = ThreadTuner(2)
    # busy cores (measured on the 2-core CPU at load 13): 2 threads 815 ms a token, 1 thread 37 ms
    picked, elapsed = _drive(tuner, {2: 0.815, 1: 0.037}, 400)
    assert tuner.best(1) == 1
    slow = picked.count(2)
    assert slow * 0.815 <= EXPLORE_SHARE * elapsed + 2 * 0.815  # the re-measuring's share of the time
    assert picked[-50:].count(1) >= 48


def test_idle_cores_are_found_again_when_the_load_goes():
    tuner = ThreadTuner(2)
    _, t = _drive(tuner, {2: 0.815, 1: 0.037}, 100)
    picked, _ = _drive(tuner, {2: 0.015, 1: 0.025}, int(2 * MAX_WAIT_S / 0.025), t)  # the load went away
    assert tuner.best(1) == 2
    assert picked[-100:].count(2) >= 95


def test_a_call_of_several_decodes_keeps_the_re_measuring_share():
    """A draft tree grown in one llama.cpp call runs all its levels on the count picked: the tuner
    spaces its tries by the whole call, so re-measuring still takes about EXPLORE_SHARE of the time."""
    tuner, t, slow = ThreadTuner(2), 0.0, 0.0
    for _ in range(400):
        n = tuner.pick(8, now=t, calls=5)
        took = 5 * (0.040 if n == 2 else 0.004)  # five 8-row levels; 2 threads busy, 1 quick
        tuner.record(8, n, took, now=t, calls=5)
        slow += took if n == 2 else 0.0
        t += took
    assert tuner.best(8) == 1
    assert slow <= EXPLORE_SHARE * t + 2 * 0.2


def test_calls_far_apart_keep_the_re_measuring_share_of_their_own_time():
    """A draft head's call comes once a step, between target passes that take far longer: its re-measuring
    is spaced by the time spent in such calls, not by the clock, or a count 1.7x slower was tried every
    other step (the shipped head beside SmolLM2: 34 of 60 steps on the slower count)."""
    tuner, t, slow, busy = ThreadTuner(2), 0.0, 0.0, 0.0
    for _ in range(400):
        n = tuner.pick(8, now=t, calls=7)
        took = 7 * (0.0023 if n == 2 else 0.0039)  # seven 8-row calls; 2 threads quicker
        tuner.record(8, n, took, now=t, calls=7)
        slow += took if n == 1 else 0.0
        busy += took
        t += took + 0.125  # the target's pass between two of them
    assert tuner.best(8) == 2
    assert slow <= EXPLORE_SHARE * busy + 2 * 7 * 0.0039


def test_a_counts_slow_first_decode_does_not_keep_it_off():
    """The first decode of a shape on a count pays llama.cpp's one-time costs (its graph's buffers reserved):
    that figure is replaced by the second, so the faster count is found at once, not after its slow first
    figure has decayed (the shipped head: 2 threads first read 0.54 ms a row, then 0.14, against 0.16 on 1)."""
    tuner, t, picked = ThreadTuner(2), 0.0, []
    for i in range(40):
        n = tuner.pick(8, now=t, calls=7)
        took = 7 * 8 * (0.00014 if n == 2 else 0.00016) * (4 if i == 0 else 1)
        tuner.record(8, n, took, now=t, calls=7)
        picked.append(n)
        t += took + 0.125
    assert tuner.best(8) == 2 and picked[-30:].count(2) >= 29


def test_kinds_are_measured_apart():
    tuner = ThreadTuner(2)
    for _ in range(20):  # prompt chunks pay for 2 threads, single steps do not
        n = tuner.pick(512, now=0.0)
        tuner.record(512, n, 512 * (0.001 if n == 2 else 0.002), now=0.0)
        n = tuner.pick(1, now=0.0)
        tuner.record(1, n, 0.02 if n == 2 else 0.01, now=0.0)
    assert tuner.best(512) == 2 and tuner.best(1) == 1


def test_fixed_always_gives_the_configured_count():
    tuner = ThreadTuner(4, fixed=True)
    picked, _ = _drive(tuner, {4: 1.0}, 10)
    assert picked == [4] * 10


class _Alternate(ThreadTuner):
    """Switches between 2 threads and 1 on every decode (what the tuner may do at any step)."""

    def pick(self, n_rows: int, now: float | None = None) -> int:
        self.calls = getattr(self, "calls", 0) + 1
        return 2 if self.calls % 2 else 1


def _greedy(backend, prompt: list[int], n: int) -> list[int]:
    out = [int(backend.prefill(prompt).logits[-1].argmax())]
    for _ in range(n - 1):
        fwd = backend.verify([out[-1]], [-1])
        backend.commit([0])
        out.append(int(fwd.logits[0].argmax()))
    return out


def test_greedy_tokens_do_not_depend_on_switching_the_thread_count():
    from homespec.backends.llamacpp.backend import LlamaCppBackend
    from homespec.backends.settings import BackendSettings
    from homespec.embedded import smollm2_path

    backend = LlamaCppBackend(smollm2_path(), BackendSettings(n_ctx=256, n_threads=2))
    try:
        prompt = backend.tokenizer.encode("The capital of France is", add_bos=True)
        backend._threads = ThreadTuner(2, fixed=True)
        held = _greedy(backend, prompt, 12)
        backend.reset()
        backend._threads = _Alternate(2)
        switched = _greedy(backend, prompt, 12)
        assert backend._threads.calls >= 12
    finally:
        backend.close()
    assert switched == held
