"""A bench's figures by prompt category (the edit set's kinds; the test set's chat, coding, ...).

Per category and method: total tokens over total decode time (not a mean of per-prompt rates, so
a long answer weighs what it took), its ratio to `none` on the same prompts, and tokens per target
pass over speculative steps.
"""

from __future__ import annotations

from typing import Mapping, Protocol, Sequence


class Rounds(Protocol):
    """What a method's figures give this module: one record per prompt (bench.run.MethodStats)."""

    per_prompt: Sequence[dict]


def by_category(methods: Mapping[str, Rounds]) -> list[dict]:
    """[{"category", "methods": {name: {prompts, tokens, decode_s, tokens_per_s, speedup, spec_tau}}}],
    categories in the order first met; empty when the prompts carry no category."""
    table: dict[str, dict[str, dict]] = {}
    for name, s in methods.items():
        for r in s.per_prompt:
            if r.get("category") is None:
                continue
            c = table.setdefault(r["category"], {}).setdefault(
                name, {"prompts": 0, "tokens": 0, "decode_s": 0.0, "spec_tokens": 0, "spec_steps": 0})
            c["prompts"] += 1
            c["tokens"] += r["tokens"]
            c["decode_s"] += r["decode_s"]
            c["spec_tokens"] += r["spec_tokens"]
            c["spec_steps"] += r["spec_steps"]
    out = []
    for category, methods in table.items():
        base = methods.get("none")
        base_rate = base["tokens"] / base["decode_s"] if base and base["decode_s"] else None
        row = {}
        for name, c in methods.items():
            rate = c["tokens"] / c["decode_s"] if c["decode_s"] else 0.0
            row[name] = {"prompts": c["prompts"], "tokens": c["tokens"], "decode_s": round(c["decode_s"], 4),
                         "tokens_per_s": round(rate, 3),
                         "speedup": round(rate / base_rate, 4) if base_rate else None,
                         "spec_tau": round(c["spec_tokens"] / c["spec_steps"], 4) if c["spec_steps"] else None}
        out.append({"category": category, "methods": row})
    return out
