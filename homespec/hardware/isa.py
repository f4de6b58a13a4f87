"""The CPU instruction sets llama.cpp's CPU kernels use, read from the OS (no llama.cpp needed).

x86: AVX2 (the baseline of llama.cpp's fast quantised dot products), AVX-512 and its VNNI / BF16
extensions, AVX-VNNI, and AMX (Intel's tile matrix unit, Sapphire Rapids and later), whose kernels
crash on some virtualised hosts (docs/backends.md, "AMX"). ARM: NEON (asimd), dot product, i8mm, SVE.
"""

from __future__ import annotations

from homespec.errors import UsageError

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


# llama.cpp's names for the sets its CPU backend checks when it picks a weight layout
# (ggml/src/ggml-cpu/repack.cpp ggml_repack_get_optimal_repack_type, amx/amx.cpp), from /proc/cpuinfo's flags.
# A build for this CPU (GGML_NATIVE, -march=native) has each one the CPU has.
LLAMA_FEATURES = (("AVX2", "avx2"), ("AVX512", "avx512f"), ("AVX512_VNNI", "avx512_vnni"), ("AMX_INT8", "amx_int8"),
                  ("NEON", "asimd"), ("DOTPROD", "asimddp"), ("MATMUL_INT8", "i8mm"), ("SVE", "sve"))


def llama_features(flags: set[str]) -> frozenset[str]:
    """{"AVX2", "AVX512", ...}: the llama.cpp CPU features a native build for this CPU has."""
    return frozenset(name for name, flag in LLAMA_FEATURES if flag in flags)


def apple_features(chip: str) -> frozenset[str]:
    """Apple Silicon: every M-series core has NEON with the dot product; the M2 and later add i8mm (ARMv8.6)."""
    feats = {"NEON", "DOTPROD"}
    if not chip.lower().replace(" ", "").replace("apple", "").startswith("m1"):
        feats.add("MATMUL_INT8")
    return frozenset(feats)


# --- the llama.cpp build homespec runs, as scripts/setup.sh noted it (read without importing llama_cpp) ---

AMX_CHOICES = ("auto", "on", "off")


def amx_choice() -> str:
    """HOMESPEC_LLAMA_AMX, checked: auto (the default), on or off."""
    import os

    choice = os.environ.get("HOMESPEC_LLAMA_AMX", "auto").strip().lower() or "auto"
    if choice not in AMX_CHOICES:
        raise UsageError(f"HOMESPEC_LLAMA_AMX={choice} is not one of auto, on, off",
                         hint="unset it to let homespec check this build, or use off to avoid AMX")
    return choice


def installed_variant() -> tuple[str, str]:
    """(variant, why) as scripts/setup.sh noted them in the venv; ("", "") for a build it did not make."""
    import sys
    from pathlib import Path

    try:
        lines = (Path(sys.prefix) / "homespec-llama-variant").read_text().splitlines()
    except OSError:
        return "", ""
    return (lines[0].strip() if lines else ""), (lines[1].strip() if len(lines) > 1 else "")
