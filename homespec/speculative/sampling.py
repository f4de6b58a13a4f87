"""The target's sampling distribution: temperature, top-k and top-p applied to logits.

Speculative sampling preserves *this* distribution: verification and plain decoding both call
`Sampler.probs`, so a filtered distribution (top-k / top-p) is preserved exactly too.
torch is imported inside the methods: the CLI builds a Sampler from its options before any
engine starts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from homespec.errors import UsageError

if TYPE_CHECKING:
    import torch


# The smallest temperature sampling divides by: float32's smallest normal number (2**-126). The
# logits are shifted so their maximum is 0 before the divide, so every quotient lies in [-inf, 0]
# and none is NaN for any temperature at or above it (torch may multiply by 1 / T, which is still
# finite there); below it (a subnormal, which a GPU may flush to 0, or a float64 that float32 rounds
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

    def generator(self, device: "str | torch.device" = "cpu") -> "torch.Generator":
        """A generator seeded from `seed` (or fresh entropy): all randomness of one generation."""
        import torch

        gen = torch.Generator(device=device)
        if self.seed is None:
            gen.seed()
        else:
            gen.manual_seed(torch_seed(self.seed))
        return gen

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """[.., V] logits -> [.., V] float32 probabilities (one-hot at the argmax when greedy).
        Total for every temperature, top-k and top-p the constructor accepts: finite, summing to 1."""
        import torch

        logits = logits.float()
        if self.greedy:
            return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
        # the maximum first: [-inf, 0] / T never overflows into NaN (see MIN_TEMPERATURE)
        logits = (logits - logits.amax(-1, keepdim=True)) / self.temperature
        if 0 < self.top_k < logits.shape[-1]:
            kth = torch.topk(logits, self.top_k, dim=-1).values[..., -1:]  # [.., 1]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        if self.top_p < 1.0:
            sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
            sorted_p = sorted_logits.softmax(-1)
            # Keep the smallest prefix whose mass reaches top_p: drop a token when the mass
            # *before* it already reaches top_p. The most likely token is always kept: a top_p
            # that float32 rounds to 0 would otherwise drop every token.
            drop_sorted = (sorted_p.cumsum(-1) - sorted_p) >= self.top_p
            drop_sorted[..., 0] = False
            drop = drop_sorted.scatter(-1, order, drop_sorted)
            logits = logits.masked_fill(drop, float("-inf"))
        return logits.softmax(-1)

    def sample(self, logits: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """One token per row of [.., V] logits: [..] int64 (argmax when greedy)."""
        if self.greedy:
            return logits.argmax(-1)
        return sample_from(self.probs(logits), generator)


def sample_from(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw one index per row of [.., V] (unnormalised, non-negative) weights: [..] int64."""
    import torch

    flat = probs.reshape(-1, probs.shape[-1]).float()
    out = torch.multinomial(flat, 1, generator=generator)  # [N, 1]
    return out.reshape(probs.shape[:-1])


def torch_seed(seed: int) -> int:
    """`seed` as torch.Generator.manual_seed takes it: any integer, those outside its range
    [-2**63, 2**64) reduced modulo 2**64 (the ones inside keep the stream they always had)."""
    return seed if -(1 << 63) <= seed < (1 << 64) else seed % (1 << 64)
