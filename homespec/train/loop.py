"""The training loop: AdamW, linear warmup + cosine decay, gradient clipping, checkpoints, eval."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from homespec.heap import keep_freed_memory
from homespec.nets.eagle3 import Eagle3Head
from homespec.train.batches import SeqRef, epoch_plan, iterate
from homespec.train.checkpoint import TrainState, load_checkpoint, save_checkpoint
from homespec.train.config import TrainConfig
from homespec.train.progress import Progress, ProgressFn
from homespec.train.shards import Shard
from homespec.train.ttt import Frozen, trainable, ttt_loss


def lr_at(step: int, total: int, cfg: TrainConfig) -> float:
    """Linear warmup to cfg.lr, then cosine decay to cfg.min_lr * cfg.lr at `total`."""
    warm = max(1, int(cfg.warmup * total))
    if step < warm:
        return cfg.lr * (step + 1) / warm
    t = min(1.0, (step - warm) / max(1, total - warm))
    return cfg.lr * (cfg.min_lr + (1 - cfg.min_lr) * 0.5 * (1 + math.cos(math.pi * t)))


def autocast_dtype(device: str) -> torch.dtype | None:
    """bf16 autocast where the device does it fast; fp32 on CPU (no bf16 matmul speed-up there)."""
    if device.startswith("cuda") and torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return None


def train(
    head: Eagle3Head,
    frozen: Frozen,
    shards: Sequence[Shard],
    refs: Sequence[SeqRef],
    cfg: TrainConfig,
    *,
    checkpoint: Path,
    meta: dict[str, Any],
    evaluate: Callable[[Eagle3Head], dict[str, float]] | None = None,
    progress: ProgressFn | None = None,
) -> TrainState:
    """Train `head` in place; resumes from `checkpoint` when it exists (same `meta` required)."""
    keep_freed_memory()  # half the CPU time went to page faults on fresh temporaries without it
    torch.manual_seed(cfg.seed)
    dev = cfg.device
    head.to(dev).train()
    frozen = frozen.to(dev)
    head.lm_head.weight.requires_grad_(not cfg.freeze_lm_head)  # no gradient work for a frozen read-out
    params = trainable(head, cfg.freeze_lm_head)
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.95), weight_decay=cfg.weight_decay)
    state = load_checkpoint(checkpoint, head, opt, meta) if checkpoint.is_file() else TrainState()
    plans = {e: epoch_plan(refs, cfg.seed, e, cfg.batch_tokens) for e in range(cfg.epochs)}
    total = sum(len(p) for p in plans.values())
    amp = autocast_dtype(dev)
    t0, seen = time.perf_counter(), 0
    while state.epoch < cfg.epochs:
        for i, batch in iterate(shards, refs, plans[state.epoch], state.batch):
            for group in opt.param_groups:
                group["lr"] = lr_at(state.step, total, cfg)
            batch = batch.to(dev)
            with torch.autocast(device_type=dev.split(":")[0], dtype=amp, enabled=amp is not None):
                out = ttt_loss(head, frozen, batch, cfg.ttt_steps, cfg.hidden_weight)
            opt.zero_grad(set_to_none=True)
            out.loss.backward()
            gnorm = torch.nn.utils.clip_grad_norm_(params, cfg.clip)
            opt.step()
            state.step += 1
            state.batch = i + 1
            seen += int(batch.lengths.sum())
            if state.step % cfg.log_every == 0 or state.step == total:
                rec = {"step": state.step, "epoch": state.epoch, "loss": float(out.loss.detach()),
                       "lr": opt.param_groups[0]["lr"], "grad_norm": float(gnorm),
                       "tok/s": seen / max(1e-9, time.perf_counter() - t0)}
                rec.update({f"acc{k}": a for k, a in enumerate(out.step_acc)})
                state.history.append(rec)
                if progress is not None:
                    progress(Progress("train", state.step, total, {k: v for k, v in rec.items() if k not in ("step", "lr")}))
            if evaluate is not None and cfg.eval_every and state.step % cfg.eval_every == 0:
                _evaluate(head, evaluate, state, total, progress)
            if state.step % cfg.checkpoint_every == 0:
                save_checkpoint(checkpoint, head, opt, state, meta)
        state.epoch += 1
        state.batch = 0
        save_checkpoint(checkpoint, head, opt, state, meta)
    if evaluate is not None and cfg.eval_every and (not state.history or state.history[-1].get("phase") != "eval"):
        _evaluate(head, evaluate, state, total, progress)
        save_checkpoint(checkpoint, head, opt, state, meta)
    head.eval()
    return state


def _evaluate(head: Eagle3Head, evaluate, state: TrainState, total: int, progress: ProgressFn | None) -> None:
    head.eval()
    result = evaluate(head)
    head.train()
    state.history.append({"phase": "eval", "step": state.step, **result})
    if progress is not None:
        progress(Progress("eval", state.step, total, result))
