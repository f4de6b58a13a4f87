"""Whether a --device the torch backend was given is one torch sees here (checked before weights load)."""

from __future__ import annotations

import torch

from homespec.errors import UsageError


def check_device(device: str) -> None:
    """`device` (cuda, cuda:N or mps; the caller has checked its spelling) is one torch sees."""
    if device == "mps" and not torch.backends.mps.is_available():
        raise UsageError("--device mps but torch sees no Metal GPU here", hint="use --device cpu")
    if device.startswith("cuda"):
        index = device.partition(":")[2]
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise UsageError(f"--device {device} but torch sees no CUDA GPU here", hint="use --device cpu")
        if index and (not index.isdigit() or int(index) >= count):
            raise UsageError(f"--device {device}: torch sees {count} CUDA GPU(s)", hint="use --device cuda:0")
