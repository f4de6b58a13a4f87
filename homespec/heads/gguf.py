"""A loaded (torch) EAGLE-3 / EAGLE-3.1 head as a GGUF of llama.cpp's `eagle3` architecture, for
`homespec draft export --format gguf`.

The file is written by homespec.backends.llamacpp.head_gguf, the one writer of eagle3 GGUFs (the
run-time conversion of a head's files, homespec.backends.llamacpp.head_convert, uses it too); its
docstring and docs/interop.md list every key and tensor. An EAGLE-3.1 head's file carries the
`eagle3.fc_norm` / `eagle3.norm_output` keys and the `fc_norm.weight` tensor of homespec's
llama.cpp patch (kernels/llamacpp/eagle3.1.patch): llama.cpp without the patch refuses a file with
fc_norm (one tensor more than it reads) and would run a norm_output-only file as EAGLE-3, so for
such a llama.cpp export the head's EAGLE-3 twin (`--eagle3-twin`, homespec/heads/twin.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

from homespec.backends.llamacpp.head_gguf import (ARCH, DTYPES, MARK_KEY, TargetHeader, permute_qk, read_target,
                                                  write_eagle3_gguf as write_arrays)
from homespec.errors import HomespecError, UsageError
from homespec.formats.gguf import read_gguf_header

if TYPE_CHECKING:
    from homespec.nets.eagle3 import Eagle3Head

__all__ = ["ARCH", "DTYPES", "MARK_KEY", "TargetHeader", "check_overwrite", "head_arrays", "is_exported_gguf",
           "permute_qk", "read_target", "write_eagle3_gguf"]


def check_overwrite(out: Path, force: bool, is_ours: Callable[[Path], bool]) -> None:
    """Refuse to replace something homespec did not write, unless --force."""
    if not out.exists() or force:
        return
    if not is_ours(out):
        raise UsageError(f"{out} exists and was not written by homespec draft export",
                         hint="pick another --out, or add --force to replace it")


def is_exported_gguf(path: Path) -> bool:
    if not path.is_file():
        return False
    try:
        return MARK_KEY in read_gguf_header(path).metadata
    except (HomespecError, ValueError, OSError):
        return False


def head_arrays(head: "Eagle3Head") -> dict[str, np.ndarray]:
    """The head's weights as float32 numpy arrays in the published names (its own embeddings only
    when it has them: a head as wide as its target reads the target's)."""
    return {k: v.detach().float().cpu().numpy() if v.is_floating_point() else v.detach().cpu().numpy()
            for k, v in head.state_dict().items() if k != "t2d"}


def write_eagle3_gguf(head: "Eagle3Head", target: TargetHeader, out: Path, *, dtype: str, name: str) -> int:
    """Write `head` to `out` atomically; returns the file's size in bytes."""
    return write_arrays(head.config, head_arrays(head), target, out, dtype=dtype, name=name)
