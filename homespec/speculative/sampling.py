"""The target's sampling distribution: temperature, top-k and top-p applied to logits.

Speculative sampling preserves *this* distribution: verification and plain decoding both call
`Sampler.probs`, so a filtered distribution (top-k / top-p) is preserved exactly too. numpy on the
host, over the logits a backend hands out (homespec.contracts.backend); every draw comes from one
numpy Generator per answer, seeded from the request (`Sampler.generator`, `rng_seed`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from homespec.errors import UsageError

# The smallest temperature sampling divides by: float32's smallest normal number (2**-126). The
# logits are shifted so their maximum is 0 before the divide, so every quotient lies in [-inf, 0]
# and none is NaN for any temperature at or above it (a float32 divide by it is still finite
# there); below it (a subnormal, which a GPU may flush to 0, or a float64 that float32 rounds
# to 0) the distribution is the greedy one, which is its limit as T -> 0.
MIN_TEMPERATURE = 2.0 ** -126


@dataclass(frozen=True, slots=True)
class Sampler:
    temperature: float = 0.0  # 0 = greedy (argmax); so is anything below MIN_TEMPERATURE
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1 = off
    seed: int | None = None  # None = a fresh random seed per generator()

    def __post_init__(self) -> None:
        # the user-facing ranges (homespec.limits: temperature at most 2) are checked where options
        # are parsed; here only what the math needs: finite, and inside its domain
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise UsageError(f"temperature {self.temperature} is not a finite number >= 0",
                             hint="use 0 for greedy or a value such as 0.7")
        if self.top_k < 0:
            raise UsageError(f"top-k {self.top_k} is negative", hint="use 0 to turn top-k off")
        if not (math.isfinite(self.top_p) and 0.0 < self.top_p <= 1.0):
            raise UsageError(f"top-p {self.top_p} is outside (0, 1]", hint="use 1.0 to turn top-p off")

    @property
    def greedy(self) -> bool:
        return self.temperature < MIN_TEMPERATURE

    def generator(self) -> np.random.Generator:
        """A generator seeded from `seed` (or fresh entropy): all randomness of one generation."""
        return np.random.default_rng(None if self.seed is None else rng_seed(self.seed))

    def probs(self, logits: np.ndarray) -> np.ndarray:
        """[.., V] logits -> [.., V] float32 probabilities (one-hot at the argmax when greedy).
        Total for every temperature, top-k and top-p the constructor accepts: finite, summing to 1."""
        logits = np.asarray(logits, dtype=np.float32)
        if self.greedy:
            out = np.zeros(logits.shape, dtype=np.float32)
            np.put_along_axis(out, logits.argmax(-1)[..., None], 1.0, axis=-1)
            return out
        # the maximum first: [-inf, 0] / T never overflows into NaN (see MIN_TEMPERATURE); a
        # quotient past float32's range is -inf, a probability of 0, as it should be
        with np.errstate(over="ignore"):
            logits = (logits - logits.max(-1, keepdims=True)) / np.float32(self.temperature)
        if 0 < self.top_k < logits.shape[-1]:
            kth = -np.partition(-logits, self.top_k - 1, axis=-1)[..., self.top_k - 1:self.top_k]  # [.., 1]
            logits = np.where(logits < kth, np.float32(-np.inf), logits)
        if self.top_p < 1.0:
            order = np.argsort(-logits, axis=-1, kind="stable")  # [.., V] most likely first
            sorted_p = _softmax(np.take_along_axis(logits, order, -1))
            # Keep the smallest prefix whose mass reaches top_p: drop a token when the mass
            # *before* it already reaches top_p. The most likely token is always kept: a top_p
            # that float32 rounds to 0 would otherwise drop every token.
            drop_sorted = (np.cumsum(sorted_p, -1) - sorted_p) >= self.top_p
            drop_sorted[..., 0] = False
            drop = np.empty_like(drop_sorted)
            np.put_along_axis(drop, order, drop_sorted, axis=-1)
            logits = np.where(drop, np.float32(-np.inf), logits)
        return _softmax(logits)

    def sample(self, logits: np.ndarray, generator: np.random.Generator | None = None) -> np.ndarray:
        """One token per row of [.., V] logits: [..] int64 (argmax when greedy)."""
        if self.greedy:
            return np.asarray(np.asarray(logits).argmax(-1), dtype=np.int64)
        return sample_from(self.probs(logits), generator)


def _softmax(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis of float32 values whose maximum is finite (-inf entries get 0)."""
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def sample_from(probs: np.ndarray, generator: np.random.Generator | None = None) -> np.ndarray:
    """Draw one index per row of [.., V] (unnormalised, non-negative) weights: [..] int64."""
    gen = generator if generator is not None else np.random.default_rng()
    p = np.asarray(probs, dtype=np.float64)
    flat = p.reshape(-1, p.shape[-1])  # [N, V]
    return inverse_cdf(flat, gen.random(flat.shape[0])).reshape(p.shape[:-1])


def inverse_cdf(weights: np.ndarray, u: np.ndarray) -> np.ndarray:
    """[N, V] non-negative float64 weights (each row some positive), [N] uniforms in [0, 1) ->
    [N] int64: the first index whose cumulative weight exceeds u * the row's total, a draw from
    the normalised row. A zero weight is never drawn: u * total lands inside a positive step."""
    cdf = np.cumsum(weights, -1)  # [N, V]
    above = cdf > (u * cdf[:, -1])[:, None]
    out = above.argmax(-1)
    rounded = ~above[:, -1]  # u * total rounded up to the total itself: the last positive weight
    if rounded.any():
        out[rounded] = weights.shape[-1] - 1 - (weights[rounded, ::-1] > 0).argmax(-1)
    return out.astype(np.int64)


def rng_seed(seed: int) -> int:
    """`seed` as numpy's generators take it (a non-negative integer): any integer a client sends,
    reduced modulo 2**64, as torch's Generator.manual_seed reduced it (-1 and 2**64 - 1 seed the
    same stream, and so do s and s + 2**64)."""
    return seed % (1 << 64)
