"""The figures `homespec chat` shows: one answer's (the live status line and the readout after it)
and the conversation's (/stats), all counted from the steps Session.stream reports (StepFigures).

    tok/s            tokens after an answer's first, over the wall time from its first token to its last
    tokens/pass      tokens emitted per target verification pass (EAGLE's tau; 1.00 = plain decoding)
    drafts accepted  accepted draft tokens over drafted ones ("no drafts": plain decoding throughout),
                     and how many each drafter drafted that were accepted ("ngram 40, suffix 6": with
                     --method auto, who drafted what the answer kept)
    context          committed tokens in the target's cache, of its context length
    ttft             time to first token: from sending the message to the answer's first token
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from homespec.speculative.steps import Step


@dataclass
class Totals:
    answers: int = 0
    tokens: int = 0  # tokens emitted after each answer's first
    decode_s: float = 0.0  # wall time from each answer's first token to its last
    ttft_s: float = 0.0  # time to first token, summed over answers
    passes: int = 0  # verification passes after the prefill
    drafted: int = 0
    accepted: int = 0
    fallback: int = 0  # plain steps the guard chose while a drafter was there
    context: int = 0  # committed tokens after the latest step
    accepted_by: dict[str, int] = field(default_factory=dict)  # accepted draft tokens per drafter

    def add(self, other: "Totals") -> None:
        for name in ("answers", "tokens", "decode_s", "ttft_s", "passes", "drafted", "accepted", "fallback"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for drafter, n in other.accepted_by.items():
            self.accepted_by[drafter] = self.accepted_by.get(drafter, 0) + n
        self.context = other.context

    def line(self) -> str:
        tps = self.tokens / self.decode_s if self.decode_s else 0.0
        tau = self.tokens / self.passes if self.passes else 0.0
        drafts = f"{self.accepted / self.drafted:.0%} of drafts accepted" if self.drafted else "no drafts"
        if self.accepted_by:
            drafts += " (" + ", ".join(f"{d} {n}" for d, n in sorted(self.accepted_by.items(), key=lambda x: -x[1])) + ")"
        return f"{tps:.1f} tok/s · {tau:.2f} tokens/pass · {drafts}"

    def ttft_text(self) -> str:
        mean = self.ttft_s / self.answers if self.answers else 0.0
        return f"ttft {mean:.1f} s" if self.answers <= 1 else f"mean ttft {mean:.1f} s"


@dataclass
class Answer:
    """One answer's figures as its steps arrive. The clock starts when the message is sent."""

    drafting: bool  # a drafter is there: plain steps are the guard's fallbacks
    sent: float = field(default_factory=time.perf_counter)
    totals: Totals = field(default_factory=Totals)
    first: float | None = None  # when the first token came

    def first_token(self, step: Step) -> None:
        """The prefill's step: the first token is out."""
        self.first = time.perf_counter()
        self.totals.answers = 1
        self.totals.ttft_s = self.first - self.sent
        self.totals.context = step.n_past

    def add_step(self, step: Step) -> None:
        """A step after the prefill, as Session.stream reports it (a StepFigures)."""
        t = self.totals
        t.passes += 1
        t.tokens += len(step.tokens)
        t.drafted += step.draft_size
        t.accepted += step.accepted
        if step.drafter is not None and step.accepted:
            t.accepted_by[step.drafter] = t.accepted_by.get(step.drafter, 0) + step.accepted
        t.fallback += 1 if self.drafting and not step.speculative else 0
        t.context = step.n_past
        if self.first is not None:
            t.decode_s = time.perf_counter() - self.first


def figures(t: Totals, max_context: int) -> str:
    """The readout's figures, live and final alike."""
    return f"{t.line()} · context {t.context}/{max_context} · {t.ttft_text()}"
