"""The Sampler is total over its whole input range: every temperature > 0 (subnormals included) and
every top-p in (0, 1] give finite probabilities that sum to 1; what the math cannot divide by is
greedy, a top-p that keeps nothing keeps the most likely token."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from homespec.errors import UsageError
from homespec.speculative.sampling import MIN_TEMPERATURE, Sampler, rng_seed, sample_from

V = 32
temperatures = st.floats(min_value=0.0, exclude_min=True, allow_nan=False, allow_infinity=False,
                         allow_subnormal=True)
top_ps = st.floats(min_value=0.0, max_value=1.0, exclude_min=True, allow_nan=False, allow_subnormal=True)
logit_rows = st.lists(st.floats(min_value=-1e4, max_value=1e4, allow_nan=False, width=32), min_size=V, max_size=V)


@settings(max_examples=300, deadline=None)
@given(temperature=temperatures, top_p=top_ps, top_k=st.integers(0, V + 1), rows=st.lists(logit_rows, min_size=1,
                                                                                           max_size=3))
def test_probabilities_are_finite_and_sum_to_one(temperature, top_p, top_k, rows):
    logits = np.asarray(rows, dtype=np.float32)
    sampler = Sampler(temperature=temperature, top_k=top_k, top_p=top_p, seed=0)
    p = sampler.probs(logits)
    assert np.isfinite(p).all() and (p >= 0).all()
    np.testing.assert_allclose(p.sum(-1), np.ones(len(rows)), atol=1e-4)
    token = sample_from(p, sampler.generator())  # drawable: never a NaN row or a zero-weight token
    assert (np.take_along_axis(p, token.reshape(-1, 1), -1) > 0).all()


@pytest.mark.parametrize("temperature", [1e-300, 5e-324, 1e-45, MIN_TEMPERATURE / 2, float.fromhex("0x1p-149")])
def test_a_temperature_float32_cannot_divide_by_is_greedy(temperature):
    logits = np.array([[1.0, 3.0, 2.0, -5.0]], dtype=np.float32)
    sampler = Sampler(temperature=temperature)
    assert sampler.greedy
    assert sampler.probs(logits).tolist() == [[0.0, 1.0, 0.0, 0.0]]


def test_the_smallest_divisible_temperature_is_the_greedy_limit():
    logits = np.array([[1.0, 3.0, 2.0, -5.0]], dtype=np.float32)
    sampler = Sampler(temperature=MIN_TEMPERATURE)
    assert not sampler.greedy
    assert sampler.probs(logits).tolist() == [[0.0, 1.0, 0.0, 0.0]]


@pytest.mark.parametrize("top_p", [1e-300, 5e-324, 1e-9])
def test_a_top_p_that_keeps_nothing_keeps_the_top_token(top_p):
    logits = np.array([[1.0, 3.0, 2.0, -5.0]], dtype=np.float32)
    p = Sampler(temperature=1.0, top_p=top_p).probs(logits)
    assert p.tolist() == [[0.0, 1.0, 0.0, 0.0]]


@pytest.mark.parametrize("field, value", [("temperature", math.nan), ("temperature", math.inf), ("temperature", -1.0),
                                          ("top_p", math.nan), ("top_p", 0.0), ("top_p", 1.5), ("top_k", -1)])
def test_values_outside_the_domain_are_refused(field, value):
    with pytest.raises(UsageError):
        Sampler(**{field: value})


@pytest.mark.parametrize("seed", [0, -1, 2**63 - 1, -(2**63), 2**64 - 1, 2**64, 2**200, -(2**200)])
def test_every_integer_seeds_a_generator(seed):
    gen = Sampler(temperature=1.0, seed=seed).generator()
    assert isinstance(float(gen.random()), float)
    assert 0 <= rng_seed(seed) < 2**64
    assert rng_seed(seed) == seed or seed < 0 or seed >= 2**64  # seeds numpy takes as they are keep their stream
    assert Sampler(seed=seed).generator().random() == Sampler(seed=seed + 2**64).generator().random()


def test_the_same_seed_draws_the_same_tokens():
    logits = np.random.default_rng(0).normal(size=(3, 50)).astype(np.float32)
    s = Sampler(temperature=1.0, seed=7)
    assert s.sample(logits, s.generator()).tolist() == s.sample(logits, s.generator()).tolist()
    other = [Sampler(temperature=1.0, seed=k).sample(logits, Sampler(seed=k).generator()).tolist() for k in range(8)]
    assert len({tuple(o) for o in other}) > 1  # different seeds, different draws
