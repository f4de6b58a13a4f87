"""The quantisation tables of profiles/quants.toml: ggml block sizes, llama.cpp's file types, the
fallback chain, short names and exllamav2's head and cache bits; and the bytes a tensor takes.

Every number is read from the source named beside it in the TOML. Pure: tomllib only.
"""

from __future__ import annotations

import math
import tomllib
from functools import cache
from pathlib import Path

from homespec.errors import HomespecError, UsageError

_PACKAGE = Path(__file__).resolve().parent.parent


def profiles_dir() -> Path:
    """The catalogue folder: the repository's profiles/ or the copy shipped in homespec/data/."""
    for folder in (_PACKAGE.parent / "profiles", _PACKAGE / "data" / "profiles"):
        if (folder / "quants.toml").is_file():
            return folder
    raise HomespecError(
        "the homespec catalogue (profiles/*.toml) is missing",
        hint="reinstall homespec; the TOML files ship in homespec/data/profiles",
    )


@cache
def _tables() -> dict:
    with open(profiles_dir() / "quants.toml", "rb") as f:
        return tomllib.load(f)


_T = _tables()

# name -> (elements per block, bytes per block), for every ggml type.
GGML_TYPES: dict[str, tuple[int, int]] = {n: (v["block"], v["bytes"]) for n, v in _T["types"].items()}
GGML_TYPE_IDS: dict[int, str] = {v["id"]: n for n, v in _T["types"].items()}
# llama.cpp file type name -> LLAMA_FTYPE_* id and the type most tensors start from.
FTYPE_IDS: dict[str, int] = {n: v["id"] for n, v in _T["ftypes"].items()}
FTYPE_DEFAULT: dict[str, str] = {n: v["default"] for n, v in _T["ftypes"].items()}
FALLBACK: dict[str, str] = dict(_T["fallback"])
ALIASES: dict[str, str] = dict(_T["aliases"])

# Popular file types first, so error messages and pickers show the useful ones.
POPULAR = ("Q4_K_M", "Q4_K_S", "Q5_K_M", "Q5_K_S", "Q6_K", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
           "IQ4_XS", "IQ4_NL", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q2_K", "Q2_K_S", "IQ3_XXS", "IQ3_XS",
           "IQ3_S", "IQ3_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ1_S", "IQ1_M", "F16", "BF16", "F32")
FILE_TYPES: tuple[str, ...] = POPULAR + tuple(n for n in FTYPE_IDS if n not in POPULAR)

EXL2_HEAD_BITS: int = _T["exl2"]["head_bits"]
# mode -> {"k_bits", "v_bits", "scale_group", "temp_fp16"}, as exllamav2's cache classes store them.
EXL2_CACHE_MODES: dict[str, dict] = dict(_T["exl2"]["cache"])


def tensor_bytes(ggml_type: str, n_elements: int) -> int:
    """Bytes of `n_elements` stored as `ggml_type` (whole blocks only, as ggml stores them)."""
    try:
        block, size = GGML_TYPES[ggml_type]
    except KeyError:
        raise UsageError(f"unknown ggml type '{ggml_type}'", hint="one of: " + ", ".join(GGML_TYPES)) from None
    if n_elements % block:
        raise HomespecError(
            f"{n_elements} elements do not fill whole {ggml_type} blocks of {block}",
            hint="rows of a quantised tensor must be a multiple of the block size",
        )
    return n_elements // block * size


def row_tensor_bytes(ggml_type: str, shape: tuple[int, ...]) -> int:
    """Bytes of a tensor of ggml `shape` stored as `ggml_type`: ggml quantises row by row (ne[0] is
    the row), so bytes = rows x row size."""
    block, size = GGML_TYPES[ggml_type]
    return math.prod(shape[1:]) * (shape[0] // block) * size
