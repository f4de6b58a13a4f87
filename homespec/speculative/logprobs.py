"""Log-probabilities of emitted tokens, from the target's own logits at each emitted position.

A speculative step emits several tokens from one target pass: accepted drafted token j+1 and the
target's next token are scored on the verification logits of the accepted path's nodes (row
path[j] is the target's distribution after root..path[j], the same distribution one-token decoding
computes at that position). So a drafted token's log-probability is the target's, never a
placeholder. The distribution is the model's raw one: before temperature, top-k / top-p and any
grammar mask (as OpenAI's and vLLM's default `raw_logprobs` report it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

MAX_TOP = 20  # OpenAI's bound on top_logprobs


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    token: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()  # the most likely tokens at this position, best first


def token_logprobs(logits: torch.Tensor, tokens: Sequence[int], top_n: int) -> tuple[TokenLogprob, ...]:
    """logits [K, V] (row k: the distribution token k was drawn from), K tokens -> K records with
    the `top_n` alternatives each."""
    if not tokens:
        return ()
    lp = torch.log_softmax(logits[:len(tokens)].float(), dim=-1)  # [K, V]
    ids = torch.tensor(list(tokens), dtype=torch.long)
    chosen = lp.gather(-1, ids.unsqueeze(-1)).squeeze(-1).tolist()  # [K]
    tops: list[tuple[tuple[int, float], ...]] = [()] * len(tokens)
    if top_n > 0:
        values, index = torch.topk(lp, min(top_n, lp.shape[-1]), dim=-1)  # [K, N]
        tops = [tuple(zip(i, v)) for i, v in zip(index.tolist(), values.tolist())]
    return tuple(TokenLogprob(int(t), float(c), top) for t, c, top in zip(tokens, chosen, tops))
