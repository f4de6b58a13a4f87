"""What the engine puts on a request's Handle (and Session.stream yields): small frozen records every consumer reads (chat's status line,
generate's JSON, bench's tables), one source of the figures.

Per step of the decode loop: a StepFigures (what the step drafted, accepted and cost), then a
TextDelta (the step's token ids and the text they made final). Last: a Finish with the reason
and the answer's totals.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Union

from homespec.speculative.steps import Step

if TYPE_CHECKING:
    from homespec.speculative.logprobs import TokenLogprob


@dataclass(frozen=True, slots=True)
class StepFigures:
    step: Step  # the loop's own record: tokens, accepted, draft_size, n_past, times, speculative
    prefill: bool  # the first step: the prompt's pass and the first token


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str  # new visible text ("" while a character or a stop string is incomplete)
    token_ids: tuple[int, ...]  # the ids emitted with it (() for the text released at the end)
    logprobs: tuple["TokenLogprob", ...] = ()  # one per id, when the request asked (EngineRequest.logprobs)


@dataclass(frozen=True, slots=True)
class Finish:
    """The answer's end: why, its text and ids, and its totals."""

    finish: str | None  # "eos" | "stop" | "length" | "context"; None when it was cut short
    text: str
    token_ids: tuple[int, ...]  # every id emitted, a stop string's step included
    prompt_token_ids: tuple[int, ...]
    steps: tuple[Step, ...]
    prefill_s: float  # the prompt's pass and the first token
    decode_s: float  # the rest of the answer
    cached_tokens: int = 0  # prompt tokens reused from the cache, not prefilled (llama-server's cache_n)

    @property
    def target_passes(self) -> int:
        """Target forward passes: the prefill plus one verification per step."""
        return len(self.steps)

    @property
    def mean_accepted(self) -> float:
        """Tokens emitted per verification pass (accepted drafts + the target's own token): EAGLE's tau."""
        spec = self.steps[1:]
        return sum(len(s.tokens) for s in spec) / len(spec) if spec else 0.0

    @property
    def tokens_per_s(self) -> float:
        """Decode speed: tokens after the first, over the time after the prefill."""
        n = len(self.token_ids) - 1
        return n / self.decode_s if self.decode_s > 0 and n > 0 else 0.0

    def acceptance_by_depth(self) -> list[float]:
        """Fraction of speculative steps that accepted at least d draft tokens, d = 1, 2, ..."""
        spec = [s for s in self.steps[1:] if s.speculative and s.draft_size > 0]
        if not spec:
            return []
        deepest = max(s.accepted for s in spec)
        return [sum(1 for s in spec if s.accepted >= d) / len(spec) for d in range(1, deepest + 1)]


Response = Union[StepFigures, TextDelta, Finish]


def final(responses: Iterable[Response]) -> Finish:
    """Run a stream to its end -> its Finish (for consumers that want the whole answer)."""
    last = None
    for last in responses:
        pass
    assert isinstance(last, Finish), "a stream ends with its Finish"
    return last
