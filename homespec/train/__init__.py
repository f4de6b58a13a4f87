"""Training EAGLE-3 / EAGLE-3.1 draft heads by self-distillation (`homespec draft train`).

`train_head(TrainConfig(...))` is the whole pipeline; config.py holds every setting with its
default; the stages live in their own modules: data.py (the target answers prompts, features
recorded), vocab.py (draft vocabulary), ttt.py (training-time test loss), loop.py (optimiser,
schedule, checkpoints), evaluate.py (held-out acceptance), export.py. torch is imported with
api.py, when train_head runs; llama_cpp when data is generated on it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from homespec.train.config import TrainConfig

if TYPE_CHECKING:
    from homespec.train.api import TrainResult
    from homespec.train.progress import ProgressFn


def train_head(config: TrainConfig, *, progress: "ProgressFn | None" = None) -> "TrainResult":
    """See homespec.train.api.train_head."""
    from homespec.train.api import train_head as _train_head  # torch, and a cycle: train.api imports this package

    return _train_head(config, progress=progress)


__all__ = ["TrainConfig", "train_head"]
