"""A user's quantisation name -> the canonical one: llama.cpp file types, their short aliases, EXL2 rates."""

from __future__ import annotations

import re

from homespec.errors import UsageError
from homespec.quant.tables import ALIASES, FTYPE_IDS, POPULAR

_EXL2_RE = re.compile(r"^(?:exl2[-_ ]?)?(\d+(?:\.\d+)?)(?:[-_ ]?bpw)?(?:[-_ ]?exl2)?$")


def normalize_quant(text: str) -> str:
    """A user's quant name -> canonical: "q4" -> "Q4_K_M", "4.65bpw" -> "EXL2-4.65", "bf16" -> "BF16"."""
    raw = text.strip()
    low = raw.lower()
    if "exl2" in low or "bpw" in low:
        m = _EXL2_RE.match(low)
        if m and 1.0 <= float(m.group(1)) <= 16.0:
            return f"EXL2-{float(m.group(1)):g}"
        raise UsageError(f"cannot read an EXL2 bits-per-weight from '{text}'", hint="write e.g. exl2-4.65 or 4.65bpw")
    key = low.replace("-", "_")
    if key in ALIASES:
        return ALIASES[key]
    up = key.upper()
    if up in FTYPE_IDS:
        return up
    raise UsageError(
        f"unknown quantisation '{text}'",
        hint="one of: q2, q3, q4, q5, q6, q8, " + ", ".join(POPULAR) + ", or EXL2 as exl2-4.65 / 4.65bpw",
    )
