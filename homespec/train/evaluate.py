"""Held-out acceptance: the real drafter and the real verification loop on a few dev prompts.

tau = mean over speculative steps of (accepted draft tokens + 1): the tokens one target pass
yields (EAGLE papers' "average acceptance length"). Greedy, so the output is the target's own.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from homespec.backends.llamacpp.backend import LlamaCppBackend
from homespec.backends.settings import BackendSettings
from homespec.backends.torch.backend import TorchBackend
from homespec.engine.run import decode
from homespec.formats.acceptance import write_record
from homespec.nets.eagle3 import Eagle3Head
from homespec.speculative.drafters.eagle3_torch import Eagle3Drafter
from homespec.speculative.steps import Limits


@dataclass(frozen=True, slots=True)
class Acceptance:
    tau: float  # tokens per target pass while speculating
    steps: int  # speculative steps measured
    tokens: int  # tokens emitted
    at_least: tuple[float, ...] = ()  # share of steps that accepted >= d drafts, d = 1..depth


class AcceptanceMeter:
    """Keeps the target loaded between measurements (loading is the slow part)."""

    def __init__(self, target: str, prompts: Sequence[Any], *, backend: str = "llamacpp", max_new_tokens: int = 64,
                 depth: int = 6, topk: int = 8, total: int = 48, n_ctx: int = 2048, device: str | None = None) -> None:
        if backend == "llamacpp":
            self._backend = LlamaCppBackend(target, BackendSettings(n_ctx=n_ctx))
        else:
            self._backend = TorchBackend.load(target, device=device, max_context=n_ctx)
        tok = self._backend.tokenizer
        self._prompts = [
            tok.encode(tok.chat_prompt([{"role": "user", "content": p.turns[0]}]), add_bos=True, special=True)
            for p in prompts
        ]
        self._max_new = max_new_tokens
        self._tree = dict(depth=depth, topk=topk, total=total)

    def measure(self, head: Eagle3Head, shape: tuple[int, int, int] | None = None) -> Acceptance:
        """shape: (depth, topk, total) instead of the meter's tree."""
        head = copy.deepcopy(head).float().cpu().eval()
        tree = dict(zip(("depth", "topk", "total"), shape)) if shape else self._tree
        drafter = Eagle3Drafter(head, self._backend, **tree)
        counts = [0] * (tree["depth"] + 1)
        steps = accepted = emitted = 0
        with torch.no_grad():
            for ids in self._prompts:
                self._backend.reset()
                for st in decode(self._backend, drafter, ids, limits=Limits(max_tokens=self._max_new)):
                    emitted += len(st.tokens)
                    if st.speculative:
                        steps += 1
                        accepted += st.accepted
                        counts[min(st.accepted, tree["depth"])] += 1
        self._backend.reset()
        at_least = tuple(sum(counts[d:]) / steps for d in range(1, tree["depth"] + 1)) if steps else ()
        return Acceptance(tau=(accepted + steps) / steps if steps else 0.0, steps=steps, tokens=emitted, at_least=at_least)

    def record(self, head: Eagle3Head, head_dir, shapes, **about) -> list[dict]:
        """Measure `shapes` [(depth, topk, total), ...] and write the head's acceptance.json."""
        rows = []
        for d, k, n in shapes:
            a = self.measure(head, (d, k, n))
            rows.append({"depth": d, "topk": k, "total": n, "tau": round(a.tau, 4), "steps": a.steps,
                         "at_least": [round(x, 4) for x in a.at_least]})
        write_record(head_dir, rows, prompts=len(self._prompts), max_new_tokens=self._max_new, **about)
        return rows

    def close(self) -> None:
        self._backend.close()
