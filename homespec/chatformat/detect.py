"""Which tool-call format a chat template speaks, read from the markers its source writes.

    tool_format(source) -> Hermes() | Llama3() | Mistral() | Harmony() | DeepSeek(...) | Glm() | None

A template that never mentions `tools` takes none (None): its model was not trained to call
them, and `homespec serve --chat-template-file` can give it a template that does. One that renders
tools without any known marker is read as Hermes, the most common syntax among templates that
do not name theirs.
"""

from __future__ import annotations

from homespec.chatformat.base import ToolFormat
from homespec.chatformat.deepseek import DeepSeek
from homespec.chatformat.glm import Glm
from homespec.chatformat.harmony import Harmony
from homespec.chatformat.hermes import Hermes
from homespec.chatformat.llama3 import Llama3
from homespec.chatformat.mistral import Mistral


def takes_tools(source: str | None) -> bool:
    return bool(source) and "tools" in source


def tool_format(source: str | None) -> ToolFormat | None:
    if not takes_tools(source):
        return None
    assert source is not None
    if "<|channel|>" in source:
        return Harmony()
    if "[TOOL_CALLS]" in source:
        return Mistral()
    if "tool▁call▁begin" in source or "tool▁calls▁begin" in source:
        return DeepSeek(fenced="```json" in source)
    if "<arg_key>" in source:
        return Glm()
    if "<tool_call>" in source:
        return Hermes()
    if "<|python_tag|>" in source or "<|start_header_id|>" in source:
        return Llama3()
    return Hermes()
