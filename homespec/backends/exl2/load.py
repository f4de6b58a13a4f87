"""exllamav2 imported with an error a user can act on. The EXL2 backend's settings from a plan
and the model directory's check are in homespec.backends.settings, beside the other backends'.

Nothing here imports exllamav2 or torch at module level, so the checks run (and are tested)
on any machine.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from homespec.errors import HomespecError

CACHE_MODES = ("fp16", "q8", "q6", "q4")
INSTALL_HINT = "install the exl2 extra on a machine with an NVIDIA GPU and a CUDA build of torch: pip install 'homespec[exl2]'"


def import_exllamav2() -> Any:
    """The exllamav2 package, or a HomespecError saying why it cannot run here.

    exllamav2 compiles (or loads) its CUDA extension while it is imported; without a CUDA build
    of torch that build cannot succeed, and trying it can take minutes, so that case is refused
    before the import. Any failure of the import itself is caught and explained."""
    if importlib.util.find_spec("exllamav2") is None:
        raise HomespecError("the exl2 backend needs exllamav2, which is not installed", hint=INSTALL_HINT)
    import torch

    if not (torch.version.cuda or getattr(torch.version, "hip", None)):
        raise HomespecError(f"exllamav2 needs a CUDA (or ROCm) build of torch; this torch {torch.__version__} is CPU-only",
                            hint=INSTALL_HINT)
    if not torch.cuda.is_available():
        raise HomespecError("exllamav2 needs a CUDA GPU and none is visible",
                            hint="check nvidia-smi and CUDA_VISIBLE_DEVICES, or use --backend llamacpp")
    try:
        import exllamav2
        import exllamav2.attn  # noqa: F401 - the extension loads here at the latest
    except (ImportError, OSError, RuntimeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise HomespecError(f"exllamav2 could not load its CUDA extension: {first}",
                            hint="exllamav2 0.3.2 builds it with the CUDA toolkit matching torch; "
                                 "install a prebuilt exllamav2 wheel for your torch/CUDA, or use --backend llamacpp") from e
    return exllamav2
