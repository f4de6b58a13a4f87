"""One prompt through a Session: tokenise (chat template), run the loop, summarise the steps."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterator, Sequence

from homespec.errors import UsageError
from homespec.runner import Session
from homespec.speculative.loop import Limits, generate
from homespec.speculative.types import Step

if TYPE_CHECKING:
    from homespec.backends.base import Tokenizer


@dataclass
class Result:
    text: str
    token_ids: list[int]
    prompt_token_ids: list[int]
    steps: list[Step] = field(default_factory=list)
    prefill_s: float = 0.0
    decode_s: float = 0.0
    finish: str | None = None

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


def prompt_tokens(session: Session, turns: Sequence[str] | Sequence[dict[str, str]], chat: bool,
                  system: str | None = None) -> list[int]:
    return encode_prompt(session.backend.tokenizer, turns, chat, system)


def encode_prompt(tok: "Tokenizer", turns: Sequence[str] | Sequence[dict[str, str]], chat: bool,
                  system: str | None = None) -> list[int]:
    """The prompt's token ids: the last turn as plain text, or every turn in the chat template.
    Needs only the tokenizer, so a prompt can be measured before the model loads."""
    if not chat:
        text = turns[-1] if isinstance(turns[-1], str) else turns[-1]["content"]
        return tok.encode(text, add_bos=True)
    messages = [m if isinstance(m, dict) else {"role": "user", "content": m} for m in turns]
    if system:
        messages = [{"role": "system", "content": system}, *messages]
    return tok.encode(tok.chat_prompt(messages, add_generation_prompt=True), add_bos=False, special=True)


def encode_prompts(model_path: str, prompts: Sequence[Sequence[str]], chat: bool,
                   system: str | None = None) -> list[list[int]]:
    """Every prompt's token ids from the model's tokenizer alone: measured before the weights load."""
    from homespec.tokenizer import load_tokenizer

    tok = load_tokenizer(model_path)
    try:
        return [encode_prompt(tok, turns, chat, system) for turns in prompts]
    finally:
        tok.close()


def check_fits(ids: Sequence[int], ctx: int, max_tokens: int, what: str = "the prompt") -> None:
    """A prompt must leave the context room for at least one generated token (spec.loop.generate)."""
    if len(ids) >= ctx:
        suggest = -(-(len(ids) + max_tokens) // 256) * 256
        raise UsageError(f"{what} has {len(ids)} tokens; --ctx {ctx} must hold it and the answer",
                         hint=f"raise --ctx (e.g. --ctx {suggest}) or shorten the prompt")


def run(session: Session, prompt: list[int], *, sampler=None, limits: Limits = Limits(), seed: int = 0,
        on_step: Callable[[Step, str], None] | None = None, controller=None) -> Result:
    """Generate from `prompt` (token ids); `on_step(step, new_text)` streams as it goes."""
    tok = session.backend.tokenizer
    steps, res = _start(session, prompt, sampler, limits, seed, controller)
    t0 = time.perf_counter()
    shown = ""
    for step in steps:
        _take(res, step)
        if len(res.steps) == 1:
            res.prefill_s = time.perf_counter() - t0
        if on_step is not None:
            text = _text(res, tok, limits)
            if text.startswith(shown):  # a partial UTF-8 character waits for its next byte
                on_step(step, text[len(shown):])
                shown = text
    res.decode_s = time.perf_counter() - t0 - res.prefill_s
    _close(res, tok, limits)
    return res


def run_lockstep(runs: Sequence[tuple[Session, object]], prompt: list[int], *, sampler=None,
                 limits: Limits = Limits(), seed: int = 0) -> list[Result]:
    """Generate from `prompt` in several sessions at once, one step of each in turn (the order
    reversed every step), each with its own controller (or None). Machine speed that drifts over
    seconds then hits every session alike, so their speeds compare step for step. Each result's
    prefill_s and decode_s are the sums of its own steps' times, never the others'."""
    started = [_start(session, prompt, sampler, limits, seed, controller) for session, controller in runs]
    live = list(range(len(started)))
    turn = 0
    while live:
        for i in (list(live) if turn % 2 == 0 else list(reversed(live))):  # a copy: finished ones leave `live`
            step = next(started[i][0], None)
            if step is None:
                live.remove(i)
            else:
                _take(started[i][1], step)
        turn += 1
    results = []
    for (session, _), (_, res) in zip(runs, started):
        res.prefill_s = res.steps[0].t_step if res.steps else 0.0
        res.decode_s = sum(s.t_step for s in res.steps[1:])
        _close(res, session.backend.tokenizer, limits)
        results.append(res)
    return results


def _start(session: Session, prompt: list[int], sampler, limits: Limits, seed: int,
           controller) -> tuple[Iterator[Step], Result]:
    """A fresh cache and drafter, the step generator and an empty result for one answer."""
    import torch

    session.backend.reset()
    if session.drafter is not None:
        session.drafter.reset()
    gen = torch.Generator().manual_seed(seed)
    steps = generate(session.backend, session.drafter, prompt, sampler=sampler, limits=limits, generator=gen,
                     controller=controller)
    return steps, Result(text="", token_ids=[], prompt_token_ids=list(prompt))


def _take(res: Result, step: Step) -> None:
    res.steps.append(step)
    res.token_ids.extend(step.tokens)
    res.finish = step.finish or res.finish


def _text(res: Result, tok, limits: Limits) -> str:
    return _visible(tok.decode(_strip_eos(res.token_ids, tok.eos_ids)), limits.stop)


def _close(res: Result, tok, limits: Limits) -> None:
    """The answer's text, and "stop" as its finish when a stop string cut it."""
    res.text = _text(res, tok, limits)
    if res.finish is None and limits.stop and any(s in tok.decode(res.token_ids) for s in limits.stop):
        res.finish = "stop"


def _strip_eos(ids: list[int], eos) -> list[int]:
    return ids[:-1] if ids and ids[-1] in eos else ids


def _visible(text: str, stops: tuple[str, ...]) -> str:
    cut = min((text.find(s) for s in stops if s and s in text), default=-1)
    return text[:cut] if cut >= 0 else text
