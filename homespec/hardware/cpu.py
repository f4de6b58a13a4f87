"""RAM and CPU through psutil (and the OS's own name for the CPU)."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass

from homespec.hardware.apple import _sysctl


@dataclass(frozen=True, slots=True)
class HostReading:
    ram_bytes: int
    ram_free_bytes: int
    cpu_name: str
    cpu_cores: int
    os: str


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(("model name", "Model")):  # x86 / some ARM boards
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    if platform.system() == "Darwin":
        return _sysctl("machdep.cpu.brand_string") or platform.machine()
    return platform.processor() or platform.machine()


def read_host() -> HostReading:
    import psutil

    vm = psutil.virtual_memory()
    cores = psutil.cpu_count(logical=False) or os.cpu_count() or 0
    return HostReading(int(vm.total), int(vm.available), _cpu_name(), int(cores), f"{platform.system()} {platform.release()}")
