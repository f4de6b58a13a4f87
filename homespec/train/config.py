"""Every setting of a `homespec draft train` run, with the one set of defaults.

`TrainConfig` is what `homespec.train.train_head` runs and what `draft train` builds from its
options (their defaults are read from here). It checks itself when made (`check`): a config that
exists holds settings a run can start with. Only what needs the file system or a device (the
target can be read, --out is a run, --device cuda has a GPU) is checked later, by train_head,
still before any data is generated or any model loaded.

This module imports nothing heavy: `homespec --help` reads the defaults.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from homespec.errors import UsageError
from homespec.limits import (
    DRAFT_VOCAB, EPOCHS, HIDDEN_WEIGHT, MAX_NEW_TOKENS, SEED, SKIP_SHARDS, TRAIN_TOKENS, TTT_STEPS,
)

TRAIN_BACKENDS = ("llamacpp", "torch")


@dataclass(frozen=True, slots=True)
class TrainConfig:
    # --- on the command line (`draft train --FLAG`, the field's name with dashes)
    target: str | None = None  # GGUF file or HF directory; None: the embedded SmolLM2
    out: str = "runs/head"  # the run's directory (homespec.train.rundir)
    prompts: str | None = None  # JSONL prompts; None: homespec's train split
    tokens: int = 500_000  # reply tokens of self-distilled data
    epochs: int = 2
    device: str = "cpu"  # where training (and torch data generation) runs
    draft_vocab: int = 8192
    ttt_steps: int = 5  # training-time-test unroll steps
    seed: int = 0  # prompt order, head initialisation, batch order
    max_new_tokens: int = 256  # longest self-distilled reply
    backend: str | None = None  # data generation: llamacpp or torch; None: from the target
    eagle3: bool = False  # plain EAGLE-3 (fc_norm and norm_output off)
    freeze_lm_head: bool = False  # keep the draft read-out at the target's output rows
    hidden_weight: float = 0.0  # weight of the regression onto the target's hidden state (ttt_loss)
    init: str | None = None  # start from this head's weights (homespec.train.warm)
    skip_shards: int = 0  # begin the data at this shard of the prompt order
    keep_vocab: bool = False  # keep the --init head's draft vocabulary
    data_from: tuple[str, ...] = ()  # other runs' data/ directories, also trained on
    # --- library and scripts only
    parallel: int = 16  # sequences decoded together while generating data
    n_threads: int | None = None  # llama.cpp threads for the data; None: every core
    shard_prompts: int = 64  # prompts per data shard
    batch_tokens: int = 4096  # padded positions per training batch
    lr: float = 5e-4  # peak learning rate
    weight_decay: float = 0.0
    warmup: float = 0.03  # share of all steps spent warming up
    min_lr: float = 0.05  # final lr as a share of lr
    clip: float = 0.5  # gradient-norm clip (SafeAILab traineagle3 clips at 0.5)
    eval_prompts: int = 4  # dev prompts of the held-out acceptance (0: not measured)
    eval_every: int = 500  # optimiser steps between held-out measurements (0: never)
    checkpoint_every: int = 200  # optimiser steps between checkpoints (and one per epoch)
    log_every: int = 10  # optimiser steps between history records

    def __post_init__(self) -> None:
        # paths as strings, data_from as a tuple: a config compares and hashes by value
        for name in ("target", "prompts", "init"):
            v = getattr(self, name)
            if v is not None:
                object.__setattr__(self, name, os.fspath(v))
        object.__setattr__(self, "out", os.fspath(self.out))
        object.__setattr__(self, "data_from", tuple(os.fspath(d) for d in _paths(self.data_from)))
        self.check()

    def check(self) -> None:
        """Refuse settings no run can start with: a UsageError naming the flag and a value that works."""
        for r, v in ((TRAIN_TOKENS, self.tokens), (EPOCHS, self.epochs), (TTT_STEPS, self.ttt_steps),
                     (MAX_NEW_TOKENS, self.max_new_tokens), (DRAFT_VOCAB, self.draft_vocab),
                     (SKIP_SHARDS, self.skip_shards), (SEED, self.seed), (HIDDEN_WEIGHT, self.hidden_weight)):
            r.check(v)  # the command line's ranges (homespec.limits), for the library too
        for flag, v, least, example in (
            ("parallel", self.parallel, 1, "16"), ("shard_prompts", self.shard_prompts, 1, "64"),
            ("batch_tokens", self.batch_tokens, 1, "4096"), ("weight_decay", self.weight_decay, 0, "0.0"),
            ("eval_prompts", self.eval_prompts, 0, "4"), ("eval_every", self.eval_every, 0, "500"),
            ("checkpoint_every", self.checkpoint_every, 1, "200"), ("log_every", self.log_every, 1, "10"),
        ):
            if v < least:
                raise UsageError(f"{flag} must be at least {least}, got {v}", hint=f"e.g. {flag} {example}")
        for name in ("lr", "weight_decay", "warmup", "min_lr", "clip"):
            if not math.isfinite(getattr(self, name)):
                raise UsageError(f"{name} {getattr(self, name)} is not a finite number", hint=f"e.g. {name}=0.0")
        if self.n_threads is not None and self.n_threads < 1:
            raise UsageError(f"n_threads must be at least 1, got {self.n_threads}", hint="e.g. 1, or None for every core")
        if self.lr <= 0:
            raise UsageError(f"lr must be positive, got {self.lr}", hint="e.g. 5e-4")
        if self.backend is not None and self.backend not in TRAIN_BACKENDS:
            raise UsageError(f"--backend {self.backend} cannot generate training data",
                             hint=f"use {' or '.join(TRAIN_BACKENDS)}")
        if self.init is not None and Path(self.init).resolve() == Path(self.out).resolve():
            raise UsageError(f"--init {self.init} is the output directory: the new head would overwrite the one it "
                             "starts from", hint="write the new head to another --out")
        if self.keep_vocab and self.init is None:
            raise UsageError("--keep-vocab keeps the draft vocabulary of the --init head, and there is none",
                             hint="add --init DIR, or drop --keep-vocab")


def _paths(v: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None) -> Sequence:
    """data_from as given: None, one path or several."""
    if v is None:
        return ()
    if isinstance(v, (str, os.PathLike)):
        return (v,)
    return v
