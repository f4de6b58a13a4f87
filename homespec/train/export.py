"""Writing the trained head in the published EAGLE-3 layout (config.json + model.safetensors)."""

from __future__ import annotations

import copy
import os

import torch

from homespec.nets.eagle3 import Eagle3Head, parameter_bytes, save_head

SHIP_LIMIT_BYTES = 32 * 2**20  # a shipped head stays under 32 MiB


def ship_dtype(head: Eagle3Head, limit: int = SHIP_LIMIT_BYTES) -> torch.dtype:
    """float32 when it fits under the limit, else bfloat16 (what published heads use)."""
    n = sum(p.numel() for p in head.parameters())
    return torch.float32 if 4 * n <= limit else torch.bfloat16


def export_head(head: Eagle3Head, directory: str | os.PathLike[str], dtype: torch.dtype | None = None) -> int:
    """Save a copy of `head` in `dtype` (default: ship_dtype); returns the weights' bytes.
    Only floating tensors are cast: d2t stays int64 and t2d bool."""
    out = copy.deepcopy(head).cpu().to(dtype or ship_dtype(head))
    save_head(out, directory)
    return parameter_bytes(out)
