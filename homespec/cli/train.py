"""`homespec draft train`: an EAGLE-3.1 head for a target, by self-distillation."""

from __future__ import annotations

import json
import os
from typing import Annotated, Optional

import typer

from homespec import interrupt, limits
from homespec.cli import lazy
from homespec.cli.app import draft_app
from homespec.cli.options import number
from homespec.train import train_head
from homespec.train.config import TrainConfig  # light (no torch): the defaults of `draft train`

_TRAIN = TrainConfig()  # the option defaults below: one source for the CLI and the library


@draft_app.command("train")
def draft_train(
    target: Annotated[Optional[str], typer.Option("--target", help="Target model: GGUF file, HF directory, org/repo[:QUANT], ollama:NAME or lmstudio:PUB/REPO. Default: the embedded SmolLM2.")] = _TRAIN.target,
    out: Annotated[str, typer.Option("--out", help="Output directory (head + data + checkpoints): a new or empty directory, or an earlier run's to resume it.")] = _TRAIN.out,
    prompts: Annotated[Optional[str], typer.Option("--prompts", help="JSONL prompts ('prompt' or 'turns'); default: homespec's train split.")] = _TRAIN.prompts,
    tokens: Annotated[int, number(limits.TRAIN_TOKENS, "--tokens", help="Reply tokens of self-distilled data.")] = _TRAIN.tokens,
    epochs: Annotated[int, number(limits.EPOCHS, "--epochs")] = _TRAIN.epochs,
    device: Annotated[str, typer.Option("--device", help="cpu, cuda or mps.")] = _TRAIN.device,
    draft_vocab: Annotated[int, number(limits.DRAFT_VOCAB, "--draft-vocab", help="Draft vocabulary size.")] = _TRAIN.draft_vocab,
    ttt_steps: Annotated[int, number(limits.TTT_STEPS, "--ttt-steps", help="Training-time-test unroll steps.")] = _TRAIN.ttt_steps,
    seed: Annotated[int, number(limits.SEED, "--seed")] = _TRAIN.seed,
    max_new_tokens: Annotated[int, number(limits.MAX_NEW_TOKENS, "--max-new-tokens", help="Longest self-distilled reply.")] = _TRAIN.max_new_tokens,
    backend: Annotated[Optional[str], typer.Option("--backend", help="llamacpp (GGUF) or torch. Default: from the target.")] = _TRAIN.backend,
    eagle3: Annotated[bool, typer.Option("--eagle3", help="Plain EAGLE-3: fc_norm and norm_output off.")] = _TRAIN.eagle3,
    freeze_lm_head: Annotated[bool, typer.Option("--freeze-lm-head", help="Keep the draft read-out at the target's output rows.")] = _TRAIN.freeze_lm_head,
    hidden_weight: Annotated[float, number(limits.HIDDEN_WEIGHT, help="Weight of the regression onto the target's hidden state (0: off).")] = _TRAIN.hidden_weight,
    init: Annotated[Optional[str], typer.Option("--init", help="Start from this head's weights (a directory in the EAGLE-3 layout) instead of a fresh head.")] = _TRAIN.init,
    skip_shards: Annotated[int, number(limits.SKIP_SHARDS, "--skip-shards", help="Begin data at this shard of the prompt order (64 prompts each), e.g. past the ones an --init head was trained on.")] = _TRAIN.skip_shards,
    keep_vocab: Annotated[bool, typer.Option("--keep-vocab", help="Keep the --init head's draft vocabulary instead of counting one on this run's data.")] = _TRAIN.keep_vocab,
    data_from: Annotated[Optional[list[str]], typer.Option("--data-from", help="Also train on the data in this directory (another run's OUT/data, same target); repeatable.")] = None,
) -> None:
    """Train an EAGLE-3.1 draft head for a target by self-distillation (resumable)."""
    # the config checks its settings as it is made; train_head checks --target, --out, --init and
    # --data-from on disk, all before any data is generated or any model loaded
    config = TrainConfig(target=target, out=out, prompts=prompts, tokens=tokens, epochs=epochs, device=device,
                         draft_vocab=draft_vocab, ttt_steps=ttt_steps, seed=seed, max_new_tokens=max_new_tokens,
                         backend=backend, eagle3=eagle3, freeze_lm_head=freeze_lm_head, hidden_weight=hidden_weight,
                         init=init, skip_shards=skip_shards, keep_vocab=keep_vocab, data_from=tuple(data_from or ()))
    kept = (lambda: f"what {out} holds is kept: rerun the same command to resume" if os.path.isdir(out) else None)
    with interrupt.keeping(kept), lazy.RichProgress() as progress:
        result = train_head(config, progress=progress)
    print(json.dumps({"head_dir": str(result.head_dir), "steps": result.steps, "final_loss": result.final_loss,
                      "tau": result.tau, "head_bytes": result.head_bytes, "draft_vocab": result.draft_vocab,
                      "init": None if result.warm is None else {"from": str(result.warm.source),
                                                                "rows_kept": result.warm.rows_kept,
                                                                "rows_new": result.warm.rows_new}}, indent=2))
