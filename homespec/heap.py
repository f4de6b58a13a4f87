"""Keep freed memory in the process heap on glibc (Linux), for torch's CPU work.

torch allocates CPU tensors with posix_memalign. With glibc's defaults a request above 32 MiB
(glibc's largest mmap threshold; the attention scores of a training batch: 75 MB) is a fresh
mmap, unmapped on free, and freed heap memory above a small threshold is trimmed back to the
kernel, so a step that creates and drops the same temporaries every time pays a page fault for
every 4 KiB page of them, every time, and spends much of its CPU time in the kernel.
docs/training.md ("Memory") has the measured effect; benchmarks/suites/heap.py measures the setting
(applied at run time, as here) on and off side by side.

The settings: no mmap for allocations (M_MMAP_MAX = 0: everything comes from the heap and is
reused after free) and trim the heap only when more than 2 GiB at its top is free
(M_TRIM_THRESHOLD). The cost: the process keeps its peak heap until exit, as torch's CUDA caching
allocator does on a GPU. HOMESPEC_KEEP_HEAP=0 switches it off.
"""

from __future__ import annotations

import os
import sys

M_TRIM_THRESHOLD = -1  # glibc malloc.h
M_TOP_PAD = -2
M_MMAP_MAX = -4

_done: bool | None = None


def keep_freed_memory() -> bool:
    """Apply the settings once per process; True when they are in effect."""
    global _done
    if _done is not None:
        return _done
    _done = False
    if not sys.platform.startswith("linux") or os.environ.get("HOMESPEC_KEEP_HEAP", "1") == "0":
        return False
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl, ...): nothing to do
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    _done = bool(mallopt(M_MMAP_MAX, 0) and mallopt(M_TRIM_THRESHOLD, 2**31 - 1) and mallopt(M_TOP_PAD, 64 << 20))
    return _done
