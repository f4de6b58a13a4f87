"""Apple Silicon through sysctl: the chip, its RAM, and how much of it Metal lets the GPU use.

On Apple Silicon the GPU uses the machine's RAM. Metal caps what one process may keep resident
(MTLDevice.recommendedMaxWorkingSetSize); `sudo sysctl iogpu.wired_limit_mb=N` overrides the cap
and 0 means "the default". Apple does not document the default; llama.cpp logs show it:
16 GB -> 10922.67 MB and 32 GB -> 21845.34 MB (2/3 of RAM), 64 GB -> ~49152 MB (3/4 of RAM).
The widely reported rule is 3/4 above 36 GB of RAM, else 2/3 (docs/probe.md has the sources).
"""

from __future__ import annotations

import platform
import subprocess
from dataclasses import dataclass
from typing import Callable

from homespec.types import GPU

_LARGE_MAC_BYTES = 36 * 1024**3


@dataclass(frozen=True, slots=True)
class SysctlReading:
    chip: str  # machdep.cpu.brand_string, e.g. "Apple M2 Pro"
    memsize: int  # hw.memsize, bytes
    wired_limit_mb: int | None  # iogpu.wired_limit_mb (None when absent, 0 when unset)


def default_working_set(memsize: int) -> int:
    """macOS's default GPU working set: 3/4 of RAM above 36 GB, else 2/3."""
    return memsize * 3 // 4 if memsize > _LARGE_MAC_BYTES else memsize * 2 // 3


def gpu_limit_bytes(reading: SysctlReading) -> int:
    if reading.wired_limit_mb and reading.wired_limit_mb > 0:
        return min(reading.wired_limit_mb * 1024 * 1024, reading.memsize)
    return default_working_set(reading.memsize)


def gpu_from_sysctl(reading: SysctlReading,
                    bandwidth: Callable[[SysctlReading], float | None] = lambda reading: None) -> GPU:
    """The Apple GPU as a GPU spec; total_bytes is the usable working set, not all of RAM."""
    return GPU(
        name=reading.chip,
        vendor="apple",
        total_bytes=gpu_limit_bytes(reading),
        bandwidth_gbs=bandwidth(reading),
        unified=True,
        source="sysctl",
    )


def catalogue_id(reading: SysctlReading) -> str:
    """The catalogue's id for this Mac: "Apple M3 Max" with 36 GB -> "m3-max-36" (bandwidth differs
    between memory options of one chip: the 36 GB M3 Max has 300 GB/s, the others 400)."""
    chip = reading.chip.lower().removeprefix("apple").strip().replace(" ", "-")
    return f"{chip}-{round(reading.memsize / 1024**3)}"


def _sysctl(key: str) -> str | None:
    try:
        out = subprocess.run(["sysctl", "-n", key], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def read_sysctl() -> SysctlReading | None:
    """Raw readings on an Apple Silicon Mac; None anywhere else."""
    if platform.system() != "Darwin" or platform.machine() != "arm64":
        return None
    chip, mem = _sysctl("machdep.cpu.brand_string"), _sysctl("hw.memsize")
    if not chip or not mem or not mem.isdigit():
        return None
    wired = _sysctl("iogpu.wired_limit_mb")
    return SysctlReading(chip, int(mem), int(wired) if wired and wired.isdigit() else None)
