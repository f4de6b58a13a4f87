"""The target's sampling distribution: temperature, top-k and top-p applied to logits.

Speculative sampling preserves *this* distribution: verification and plain decoding both call
`Sampler.probs`, so a filtered distribution (top-k / top-p) is preserved exactly too.
torch is imported inside the methods: the CLI builds a Sampler from its options before any
engine starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from homespec.errors import UsageError

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, slots=True)
class Sampler:
    temperature: float = 0.0  # 0 = greedy (argmax)
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1 = off
    seed: int | None = None  # None = a fresh random seed per generator()

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise UsageError(f"temperature {self.temperature} is negative", hint="use 0 for greedy or a value such as 0.7")
        if self.top_k < 0:
            raise UsageError(f"top-k {self.top_k} is negative", hint="use 0 to turn top-k off")
        if not 0.0 < self.top_p <= 1.0:
            raise UsageError(f"top-p {self.top_p} is outside (0, 1]", hint="use 1.0 to turn top-p off")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def generator(self, device: "str | torch.device" = "cpu") -> "torch.Generator":
        """A generator seeded from `seed` (or fresh entropy): all randomness of one generation."""
        import torch

        gen = torch.Generator(device=device)
        if self.seed is None:
            gen.seed()
        else:
            gen.manual_seed(self.seed)
        return gen

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """[.., V] logits -> [.., V] float32 probabilities (one-hot at the argmax when greedy)."""
        import torch

        logits = logits.float()
        if self.greedy:
            return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
        logits = logits / self.temperature
        if 0 < self.top_k < logits.shape[-1]:
            kth = torch.topk(logits, self.top_k, dim=-1).values[..., -1:]  # [.., 1]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        if self.top_p < 1.0:
            sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
            sorted_p = sorted_logits.softmax(-1)
            # Keep the smallest prefix whose mass reaches top_p: drop a token when the mass
            # *before* it already reaches top_p (the most likely token is always kept).
            drop_sorted = (sorted_p.cumsum(-1) - sorted_p) >= self.top_p
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
