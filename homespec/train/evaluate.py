"""Held-out acceptance: the real drafter and the real verification loop on a few dev prompts.

tau = mean over speculative steps of (accepted draft tokens + 1): the tokens one target pass
yields (EAGLE papers' "average acceptance length"). Greedy, so the output is the target's own.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from homespec.models.eagle3 import Eagle3Head


@dataclass(frozen=True, slots=True)
class Acceptance:
    tau: float  # tokens per target pass while speculating
    steps: int  # speculative steps measured
    tokens: int  # tokens emitted


class AcceptanceMeter:
    """Keeps the target loaded between measurements (loading is the slow part)."""

    def __init__(self, target: str, prompts: Sequence[Any], *, backend: str = "llamacpp", max_new_tokens: int = 64,
                 depth: int = 6, topk: int = 8, total: int = 48, n_ctx: int = 2048, device: str | None = None) -> None:
        if backend == "llamacpp":
            from homespec.backends.llamacpp import LlamaCppBackend

            self._backend = LlamaCppBackend.load(target, n_ctx=n_ctx)
        else:
            from homespec.backends.pytorch import TorchBackend

            self._backend = TorchBackend.load(target, device=device, max_context=n_ctx)
        tok = self._backend.tokenizer
        self._prompts = [
            tok.encode(tok.chat_prompt([{"role": "user", "content": p.turns[0]}]), add_bos=True, special=True)
            for p in prompts
        ]
        self._max_new = max_new_tokens
        self._tree = dict(depth=depth, topk=topk, total=total)

    def measure(self, head: Eagle3Head) -> Acceptance:
        from homespec.spec.drafters.eagle3 import Eagle3Drafter
        from homespec.spec.loop import Limits, generate

        head = copy.deepcopy(head).float().cpu().eval()
        drafter = Eagle3Drafter(head, self._backend, **self._tree)
        steps = accepted = emitted = 0
        with torch.no_grad():
            for ids in self._prompts:
                self._backend.reset()
                for st in generate(self._backend, drafter, ids, limits=Limits(max_tokens=self._max_new)):
                    emitted += len(st.tokens)
                    if st.speculative:
                        steps += 1
                        accepted += st.accepted
        self._backend.reset()
        return Acceptance(tau=(accepted + steps) / steps if steps else 0.0, steps=steps, tokens=emitted)

    def close(self) -> None:
        self._backend.close()
