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

import numpy as np

MAX_TOP = 20  # OpenAI's bound on top_logprobs


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    token: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()  # the most likely tokens at this position, best first


def token_logprobs(logits: np.ndarray, tokens: Sequence[int], top_n: int) -> tuple[TokenLogprob, ...]:
    """logits [K, V] (row k: the distribution token k was drawn from), K tokens -> K records with
    the `top_n` alternatives each."""
    if not tokens:
        return ()
    lp = log_softmax(np.asarray(logits[:len(tokens)], dtype=np.float32))  # [K, V]
    ids = np.asarray(list(tokens), dtype=np.int64)
    chosen = np.take_along_axis(lp, ids[:, None], -1)[:, 0].tolist()  # [K]
    tops: list[tuple[tuple[int, float], ...]] = [()] * len(tokens)
    if top_n > 0:
        n = min(top_n, lp.shape[-1])
        part = np.argpartition(-lp, n - 1, axis=-1)[:, :n] if n < lp.shape[-1] else np.argsort(-lp, -1)  # [K, N]
        values = np.take_along_axis(lp, part, -1)
        order = np.lexsort((part, -values), axis=-1)  # best first, ties to the lower id
        index, values = np.take_along_axis(part, order, -1), np.take_along_axis(values, order, -1)
        tops = [tuple(zip(i, v)) for i, v in zip(index.tolist(), values.tolist())]
    return tuple(TokenLogprob(int(t), float(c), top) for t, c, top in zip(tokens, chosen, tops))


def log_softmax(x: np.ndarray) -> np.ndarray:
    """log_softmax over the last axis, shifted by the maximum first (no overflow)."""
    shifted = x - x.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
