"""What the EXL2 backend needs before exllamav2 is touched: settings from a plan, the model
directory checked, and exllamav2 imported with an error a user can act on.

Nothing here imports exllamav2 or torch at module level, so the checks run (and are tested)
on any machine.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from homespec.errors import HomespecError, UsageError
from homespec.types import ModelSpec

CACHE_MODES = ("fp16", "q8", "q6", "q4")
# exllamav2's own default scratch sizing (config.max_input_len); the planner sizes the same
# (homespec.plan.memory.EXL2_MAX_INPUT_LEN).
DEFAULT_MAX_INPUT_LEN = 2048
INSTALL_HINT = "install the exl2 extra on a machine with an NVIDIA GPU and a CUDA build of torch: pip install 'homespec[exl2]'"


@dataclass(frozen=True, slots=True)
class Exl2Settings:
    model_dir: str
    max_seq_len: int  # tokens the cache holds
    cache_mode: str  # "fp16" | "q8" | "q6" | "q4": ExLlamaV2Cache, _Q8, _Q6, _Q4
    max_input_len: int = DEFAULT_MAX_INPUT_LEN  # longest chunk one forward processes
    n_layer: int = 0
    hidden_size: int = 0
    quant: str = ""  # "EXL2-4.65": bits per weight measured from the files
    # Bytes load_autosplit keeps free on each GPU, as the plan budgeted them (empty: exllamav2's defaults).
    reserve_vram: tuple[int, ...] = ()


def check_exl2_dir(model_dir: str | os.PathLike) -> ModelSpec:
    """The directory's ModelSpec, or a UsageError/FormatError naming what is wrong with it."""
    from homespec.formats.exl2 import model_spec_from_exl2_dir

    path = Path(model_dir)
    if not path.exists():
        raise UsageError(f"no EXL2 model directory at '{path}'", hint="pass a directory made by exllamav2's convert_exl2")
    if not path.is_dir():
        raise UsageError(f"'{path}' is a file; the exl2 backend runs a model directory",
                         hint="use --backend llamacpp for GGUF files")
    return model_spec_from_exl2_dir(path)


def exl2_settings(
    model_dir: str | os.PathLike,
    plan: Any = None,
    *,
    max_context: int | None = None,
    kv_type: str | None = None,
    max_input_len: int | None = None,
) -> Exl2Settings:
    """Settings from a plan (its `.settings`: backend, n_ctx, type_k; a whole Plan also gives
    the reserve on each GPU), explicit values winning.

    The plan's --kv-type maps onto an exllamav2 cache class through plan.settings.EXL2_CACHE, and
    max_input_len is capped at the context as load_autosplit does (homespec.plan.memory.exl2_input_len).
    """
    from homespec.plan.settings import EXL2_CACHE

    spec = check_exl2_dir(model_dir)
    src = getattr(plan, "settings", plan)
    if src is not None and getattr(src, "backend", "exl2") != "exl2":
        raise UsageError(f"this plan is for the {src.backend} backend, not exl2",
                         hint="plan again with --backend exl2 (or omit --backend for an EXL2 directory)")
    ctx = max_context or getattr(src, "n_ctx", None)
    if not ctx:
        raise UsageError("no context size given for the exl2 backend", hint="pass --ctx or a plan")
    kv = (kv_type or getattr(src, "type_k", None) or "f16").lower()
    if kv not in EXL2_CACHE:
        raise UsageError(f"exllamav2 has no '{kv}' cache", hint="use --kv-type f16, q8, q6 or q4")
    if ctx < 16:
        raise UsageError(f"context {ctx} is too small", hint="use --ctx 256 or more")
    return Exl2Settings(
        model_dir=str(Path(model_dir)),
        max_seq_len=int(ctx),
        cache_mode=EXL2_CACHE[kv],
        max_input_len=int(max_input_len or min(DEFAULT_MAX_INPUT_LEN, ctx)),
        n_layer=spec.n_layer,
        hidden_size=spec.n_embd,
        quant=spec.quant or "",
        reserve_vram=_planned_reserves(plan),
    )


def _planned_reserves(plan: Any) -> tuple[int, ...]:
    """What the plan keeps free on each of its GPUs: its reserve line items, and for a GPU it left
    empty what load_autosplit would keep there (homespec.plan.place.exl2.reserve)."""
    machine = getattr(plan, "machine", None)
    if machine is None:
        return ()
    from homespec.plan.devices import devices_for
    from homespec.plan.place.exl2 import reserve

    planned = {i.device: i.bytes for i in plan.items if i.name == "reserve"}
    gpus = [d for d in devices_for(machine) if d.is_gpu]
    return tuple(planned.get(g.id, reserve(g, k)) for k, g in enumerate(gpus))


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
