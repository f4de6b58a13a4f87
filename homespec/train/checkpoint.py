"""Resumable training checkpoints: head + optimiser + schedule position + history, written atomically."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from homespec.atomic import write_with
from homespec.errors import HomespecError


@dataclass
class TrainState:
    """Where training stands; mutable while the loop runs, saved whole."""

    step: int = 0  # optimiser steps taken
    epoch: int = 0
    batch: int = 0  # batches of `epoch` already trained on
    history: list[dict[str, Any]] = field(default_factory=list)  # logged train / eval records


def save_checkpoint(path: str | os.PathLike[str], head: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    state: TrainState, meta: dict[str, Any]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    blob = {
        "head": head.state_dict(),
        "optimizer": optimizer.state_dict(),
        "state": {"step": state.step, "epoch": state.epoch, "batch": state.batch, "history": state.history},
        "meta": meta,
        "torch_rng": torch.get_rng_state(),
    }
    write_with(path, lambda tmp: torch.save(blob, tmp))


def load_checkpoint(path: str | os.PathLike[str], head: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    meta: dict[str, Any]) -> TrainState:
    """Restore head and optimiser in place; refuses a checkpoint made with other settings."""
    try:
        blob = torch.load(path, map_location="cpu", weights_only=False)
    except (OSError, RuntimeError, EOFError) as exc:
        raise HomespecError(f"{path}: cannot read the training checkpoint ({exc})",
                            hint="delete it to start training from scratch") from exc
    changed = sorted(k for k in meta if blob["meta"].get(k) != meta[k])
    if changed:
        raise HomespecError(f"{path} was written with other settings ({', '.join(changed)})",
                            hint="rerun with the original settings to resume, or delete the checkpoint")
    head.load_state_dict(blob["head"])
    optimizer.load_state_dict(blob["optimizer"])
    torch.set_rng_state(blob["torch_rng"])
    s = blob["state"]
    return TrainState(step=s["step"], epoch=s["epoch"], batch=s["batch"], history=list(s["history"]))
