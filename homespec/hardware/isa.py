"""The CPU instruction sets llama.cpp's CPU kernels use, read from the OS (no llama.cpp needed).

x86: AVX2 (the baseline of llama.cpp's fast quantised dot products), AVX-512 and its VNNI / BF16
extensions, AVX-VNNI, and AMX (Intel's tile matrix unit, Sapphire Rapids and later), whose kernels
crash on some virtualised hosts (docs/backends.md, "AMX"). ARM: NEON (asimd), dot product, i8mm, SVE.
"""

from __future__ import annotations

# (name shown, /proc/cpuinfo flag)
X86 = (("AVX2", "avx2"), ("AVX-512", "avx512f"), ("AVX-512 VNNI", "avx512_vnni"), ("AVX-512 BF16", "avx512_bf16"),
       ("AVX-VNNI", "avx_vnni"), ("AMX", "amx_int8"))
ARM = (("NEON", "asimd"), ("DOTPROD", "asimddp"), ("I8MM", "i8mm"), ("SVE", "sve"))


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """The flags of the first CPU in /proc/cpuinfo (empty where there is none, e.g. macOS)."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                cpuinfo = f.read(1 << 16)
        except OSError:
            return set()
    for line in cpuinfo.splitlines():
        if line.startswith(("flags", "Features")):
            return set(line.split(":", 1)[1].split())
    return set()


def cpu_isa(flags: set[str]) -> dict[str, bool]:
    """{"AVX2": True, ..., "AMX": False}: the sets of this CPU's family that llama.cpp uses."""
    table = ARM if "asimd" in flags else X86
    return {name: flag in flags for name, flag in table}
