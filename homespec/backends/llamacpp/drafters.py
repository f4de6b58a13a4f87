"""The draft networks llama.cpp runs beside a target (homespec.backends.registry: open_head,
open_mtp): an EAGLE head converted to an eagle3 GGUF, or the target's own MTP layers, each in a
llama.cpp context of its own on the target's device, one network for every lane of the target.
The engine wraps them in the drafters of homespec.speculative (the policy); this module only
loads and sizes them."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from homespec.backends.llamacpp.head import LlamaCppHead, read_head_file
from homespec.backends.llamacpp.head_convert import head_gguf
from homespec.backends.llamacpp.mtp import LlamaCppMtp
from homespec.contracts.drafter import MAX_DEPTH
from homespec.plan.memory import head_cells


@dataclass(frozen=True, slots=True)
class OpenedHead:
    net: Any  # LlamaCppHead: the DraftNet
    layers: tuple[int, ...]  # the target layers whose inputs it reads
    window: int | None  # the draft window it attends (None: everything)


def _lane_shape(target: Any) -> tuple[int, int]:
    return getattr(target, "lanes", 1), getattr(target, "lane_ctx", None) or target.max_context


def open_head(target: Any, where: Path, opt: Any) -> OpenedHead:
    """The head at `where` (any layout homespec reads, or an eagle3 .gguf) as an eagle3 GGUF
    (converted once and cached, --draft-dtype) loaded beside `target`; the target is set to
    capture the head's layers before its first prefill."""
    conv = head_gguf(where, target.model_path, dtype=opt.draft_dtype)
    if conv.note:
        print(f"note: {conv.note}", file=sys.stderr)
    info = read_head_file(conv.path, target.n_vocab)
    window = info.window if opt.window is None else (opt.window or None)
    lanes, lane_ctx = _lane_shape(target)
    cells = head_cells(lane_ctx, window, info.sinks, max(opt.draft_depth, MAX_DEPTH), opt.draft_topk)
    net = LlamaCppHead(info, target, lanes=lanes, cells_per_lane=cells, topk=opt.draft_topk, n_threads=opt.threads)
    target.set_feature_layers(info.layers)  # before the target's first prefill
    return OpenedHead(net, tuple(info.layers), window)


def open_mtp(target: Any, opt: Any) -> Any:
    """The target's own MTP layers (LlamaCppMtp) beside it; the target is set to hand out its rows'
    last hidden state before its first prefill."""
    lanes, lane_ctx = _lane_shape(target)
    cells = head_cells(lane_ctx, None, 0, max(opt.draft_depth, MAX_DEPTH), opt.draft_topk)
    net = LlamaCppMtp(target, lanes=lanes, cells_per_lane=cells, topk=opt.draft_topk, n_threads=opt.threads)
    target.capture_nextn()
    return net
