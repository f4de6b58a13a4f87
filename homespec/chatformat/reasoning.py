"""Thinking written between `<think>` and `</think>` (Qwen3, DeepSeek R1 and its distills, GLM,
SmolLM3), split from the answer as llama-server's `--reasoning-format deepseek` splits it.

A template may open the block itself (R1's generation prompt ends in `<think>\\n`): the answer then
starts inside it (`starts_open`). A block never closed is all thinking.
"""

from __future__ import annotations

from homespec.chatformat.base import held_prefix

OPEN, CLOSE = "<think>", "</think>"
FORMATS = ("none", "deepseek", "deepseek-legacy", "auto")  # llama-server's --reasoning-format values


def split_thinking(text: str, starts_open: bool, final: bool) -> tuple[str, str]:
    """-> (thinking, the rest). While streaming (`final` False), a tail that may begin a marker is
    held back from both."""
    body = text
    if not starts_open:
        lead = text.lstrip()
        if not lead.startswith(OPEN):
            if not final and lead and OPEN.startswith(lead):
                return "", ""  # "<thi": the block may be opening
            return "", text
        body = lead[len(OPEN):]
    end = body.find(CLOSE)
    if end < 0:
        return (body if final else body[:len(body) - held_prefix(body, [CLOSE])]), ""
    return body[:end], body[end + len(CLOSE):].lstrip("\n")


def opens_thinking(prompt: str) -> bool:
    """The rendered prompt ends inside a thinking block the template opened."""
    tail = prompt.rstrip()
    return tail.endswith(OPEN)
