"""The lines of a plan: what one consumer allocates on one device.

A line's kind is what code reads (the session's planned-vs-measured report, the suggestions, the
backends' settings); its label is what `homespec plan` prints, in its table and in --json's "name".
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from enum import Enum


class LineKind(Enum):
    """Every kind of plan line, in the order the plan's table lists them; the value is its label."""

    WEIGHTS = "weights"
    WEIGHTS_CPU_REPACK = "weights (CPU repack)"  # llama.cpp's CPU repack of mmapped weights
    WEIGHTS_AMX = "weights (AMX)"  # llama.cpp's AMX tiles of mmapped weights
    CALIBRATION = "calibration"
    DRAFT_WEIGHTS = "draft weights"
    TARGET_KV = "target KV"
    RECURRENT_STATE = "recurrent state"
    DRAFT_KV = "draft KV"
    COMPUTE = "compute"
    OUTPUT_BUFFER = "output buffer"
    TREE_SCRATCH = "tree scratch"
    DRAFT_EMBEDDINGS = "draft embeddings"
    PROMPT_CACHE = "prompt cache"
    RESERVE = "reserve"
    DRAFT_OUTPUT = "draft output"  # an EAGLE head's or MTP layers' own llama.cpp context
    DRAFT_COMPUTE = "draft compute"

    @property
    def label(self) -> str:
        return self.value


# The target's weights however the backend holds them (mapped, repacked, packed for AMX).
TARGET_WEIGHTS = frozenset({LineKind.WEIGHTS, LineKind.WEIGHTS_CPU_REPACK, LineKind.WEIGHTS_AMX})
# What a llama.cpp draft context allocates beside its weights (backends/llamacpp/head.py, mtp.py).
DRAFT_CONTEXT = frozenset({LineKind.DRAFT_KV, LineKind.DRAFT_COMPUTE, LineKind.DRAFT_OUTPUT})


@dataclass(frozen=True, slots=True)
class LineItem:
    kind: LineKind
    device: int  # the GPU's index, or homespec.plan.devices.HOST
    bytes: int
    detail: str = ""


def sum_bytes(items: Iterable[LineItem], device: int | None = None, kinds: Collection[LineKind] | None = None) -> int:
    """The bytes of the lines on `device` (every device: None) of `kinds` (every kind: None)."""
    return sum(i.bytes for i in items
               if (device is None or i.device == device) and (kinds is None or i.kind in kinds))
