"""`homespec draft train`: data by self-distillation, draft vocabulary, training-time test, export.

    OUT/homespec-run.json   written first: the directory is a training run (homespec.train.rundir)
    OUT/data/         shards + manifest (homespec.train.shards), resumable
    OUT/vocab.npz     the draft vocabulary
    OUT/train/        checkpoint.pt (resumable) and history.json (loss, accuracy, held-out tau)
    OUT/config.json + OUT/model.safetensors   the head, in the published EAGLE-3 layout
    OUT/acceptance.json   its acceptance on the dev prompts (homespec.formats.acceptance), when measured

Every stage resumes: rerunning the same command skips finished shards and continues training
from the last checkpoint. With `init`, training starts from an existing head's weights
(homespec.train.warm) instead of a fresh head.

This module imports torch and the torch-side stages at its top: homespec.train imports it only when
train_head runs, so `homespec --help` and `homespec plan` never load it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from homespec.atomic import write_text
from homespec.backends.registry import BACKENDS
from homespec.engine.options import resolve_model_path
from homespec.errors import HomespecError, UsageError
from homespec.nets.config import read_gguf_config, read_hf_config
from homespec.nets.eagle3 import Eagle3Config, Eagle3Head
from homespec.nets.load import read_hf_tensors
from homespec.plan.settings import CPU_DRAFT, GPU_DRAFT
from homespec.promptsets import load_prompts, read_prompts_file
from homespec.train.batches import sequence_refs
from homespec.train.config import TrainConfig
from homespec.train.data import DataSummary, generate_data, target_settings
from homespec.train.evaluate import AcceptanceMeter
from homespec.train.export import export_head
from homespec.train.loop import train
from homespec.train.progress import ProgressFn
from homespec.train.rundir import check_out, claim_out
from homespec.train.shards import load_shards
from homespec.train.ttt import Frozen, init_lm_head
from homespec.train.vocab import build_vocab, count_tokens, save_vocab
from homespec.train.warm import read_source, source_vocab, warm_start


@dataclass(frozen=True, slots=True)
class TrainResult:
    head_dir: Path
    data: DataSummary
    draft_vocab: int
    vocab_coverage: float  # share of reply tokens inside the draft vocabulary
    steps: int
    final_loss: float | None
    tau: float | None  # last held-out acceptance length, when measured
    head_bytes: int
    warm: Any = None  # homespec.train.warm.WarmStart when the run started from another head


def read_target_config(target: str) -> Any:
    """The target's LlamaConfig; a HomespecError for anything we cannot read."""
    p = Path(target)
    if not p.exists():
        raise HomespecError(f"target {target} does not exist", hint="pass a GGUF file or a Hugging Face model directory")
    try:
        return read_hf_config(p) if p.is_dir() else read_gguf_config(p)
    except HomespecError:
        raise
    except (OSError, ValueError, KeyError, UnicodeDecodeError) as exc:
        raise HomespecError(f"cannot read the target {target} ({exc})",
                            hint="pass a complete GGUF file or a Hugging Face directory of a Llama-family model") from exc


def target_tables(target: str):
    """(embeddings [V, H], output matrix [V, H]) as float32 torch tensors; tied models share one."""
    p = Path(target)
    if p.is_dir():
        t = read_hf_tensors(str(p))
        emb = t["model.embed_tokens.weight"].float()
        return emb, t.get("lm_head.weight", emb).float()
    import gguf
    from gguf.quants import dequantize

    found = {}
    for t in gguf.GGUFReader(str(p)).tensors:
        if t.name in ("token_embd.weight", "output.weight"):
            found[t.name] = torch.from_numpy(np.array(dequantize(t.data, t.tensor_type), dtype=np.float32))
    if "token_embd.weight" not in found:
        raise HomespecError(f"{target} has no token_embd.weight", hint="is this a decoder-only language model GGUF?")
    return found["token_embd.weight"], found.get("output.weight", found["token_embd.weight"])


def _read_data_from(dirs: Sequence[str | os.PathLike[str]], out: Path, target: str, layers: Sequence[int]):
    """[(manifest, shards)] of each --data-from directory: data made earlier for this target
    with the same feature layers (any backend, prompts, skip or reply length), read, never written."""
    found, seen, mine = [], {(out / "data").resolve()}, target_settings(target, layers)
    for d in dirs:
        d = Path(d)
        if d.resolve() in seen:
            raise UsageError(f"--data-from {d}: that data is already part of this run",
                             hint="name each data directory once, and not OUT/data itself")
        seen.add(d.resolve())
        if not (d / "manifest.json").is_file():
            hint = (f"name the run's data: --data-from {d / 'data'}" if (d / "data" / "manifest.json").is_file()
                    else "name the data/ directory inside an earlier `homespec draft train --out` directory")
            raise UsageError(f"--data-from {d}: no training data there (no manifest.json)", hint=hint)
        manifest, shards = load_shards(d)
        bad = [k for k, v in mine.items() if manifest.get(k) != v]
        if bad:
            raise UsageError(f"--data-from {d}: made for another target ({', '.join(bad)} differ)",
                             hint="pool only data this target made, with the same feature layers")
        found.append((manifest, shards))
    return found


def head_config(cfg: Any, draft_vocab: int, eagle3: bool):
    return Eagle3Config(
        hidden_size=cfg.n_embd, num_attention_heads=cfg.n_head, num_key_value_heads=cfg.n_head_kv,
        head_dim=cfg.head_dim, intermediate_size=cfg.n_ff, vocab_size=cfg.n_vocab, draft_vocab_size=draft_vocab,
        target_hidden_size=cfg.n_embd, rms_norm_eps=cfg.rms_eps, rope_theta=cfg.rope_theta,
        rope_scaling=cfg.rope_scaling, max_position_embeddings=cfg.max_context,
        fc_norm=not eagle3, norm_output=not eagle3,
    )


@dataclass(frozen=True, slots=True)
class _Inputs:
    """What a run reads before its first write: all checked before any data or model."""

    target: str  # the resolved path
    cfg: Any  # the target's LlamaConfig
    backend: str  # data generation's backend
    items: list  # the prompts
    layers: list[int]  # the feature layers
    extra: list  # [(manifest, shards)] of --data-from
    start: Any  # homespec.train.warm.Source with --init, else None


def train_head(config: TrainConfig, *, progress: ProgressFn | None = None) -> TrainResult:
    """Train an EAGLE-3.1 head (EAGLE-3 with `config.eagle3`) as `config` says; see the module docstring.

    `config` checked its own settings when it was made (TrainConfig.check); what needs the disk
    or a device is checked here, before any data is generated or any model loaded."""

    c, out = config, Path(config.out)
    inputs = _read_inputs(c)
    claim_out(out)  # every check passed: the run's marker is its first write

    # 1. data: the target answers the prompts
    data = generate_data(inputs.target, out / "data", inputs.items, tokens=c.tokens, max_new_tokens=c.max_new_tokens,
                         seed=c.seed, feature_layers=inputs.layers, backend=inputs.backend, parallel=c.parallel,
                         shard_prompts=c.shard_prompts, skip_shards=c.skip_shards, n_threads=c.n_threads,
                         device=c.device if BACKENDS[inputs.backend].torch_device else None, progress=progress)
    _, shards = load_shards(out / "data")
    shards = shards + [sh for _, more in inputs.extra for sh in more]

    # 2. draft vocabulary: the most frequent reply tokens, or with keep_vocab the --init head's own
    vocab = _draft_vocab(c, inputs, shards)

    # 3. head, frozen target tables, training-time test
    torch.manual_seed(c.seed)
    head = Eagle3Head(head_config(inputs.cfg, vocab.size, c.eagle3))
    head.d2t.copy_(torch.from_numpy(vocab.d2t))
    head.t2d.copy_(torch.from_numpy(vocab.t2d))
    embed, output = target_tables(inputs.target)
    frozen = Frozen(embed, output, torch.from_numpy(vocab.ids))
    init_lm_head(head, frozen)
    warm = None
    if inputs.start is not None:
        warm = warm_start(head, inputs.start, inputs.cfg, vocab.ids)
    state, head_bytes = _train_and_export(c, inputs, head, frozen, shards, vocab, warm, progress)
    losses = [r["loss"] for r in state.history if "loss" in r]
    taus = [r["tau"] for r in state.history if "tau" in r]
    return TrainResult(out, data, vocab.size, vocab.coverage, state.step, losses[-1] if losses else None,
                       taus[-1] if taus else None, head_bytes, warm)


def _read_inputs(c: TrainConfig) -> _Inputs:
    """The checks that read the disk or probe a device, in the order a user meets them: --out
    first (nothing else is read before it), then the target, the prompts, --data-from, --init."""
    check_out(Path(c.out))
    target = resolve_model_path(c.target)  # may download a hub model: after --out is known good
    if c.device.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError("--device cuda but torch sees no CUDA GPU", hint="use --device cpu")
    cfg = read_target_config(target)
    if c.draft_vocab > cfg.n_vocab and not c.keep_vocab:  # before hours of data generation
        raise UsageError(f"--draft-vocab {c.draft_vocab} is more than the target's {cfg.n_vocab} tokens",
                         hint=f"use --draft-vocab {min(8192, cfg.n_vocab)} (at most {cfg.n_vocab})")
    backend = c.backend or ("torch" if Path(target).is_dir() else "llamacpp")
    if BACKENDS[backend].gguf_only and Path(target).is_dir():
        raise UsageError("llama.cpp reads GGUF files, the target is a directory", hint="use --backend torch")
    items = read_prompts_file(c.prompts) if c.prompts else load_prompts("train")
    layers = cfg.default_feature_layers()
    extra = _read_data_from(c.data_from, Path(c.out), target, layers)  # checked before hours of generation
    start = None
    if c.init is not None:  # checked before hours of data generation, not after
        start = read_source(c.init, cfg, head_config(cfg, c.draft_vocab, c.eagle3))
    return _Inputs(target, cfg, backend, items, layers, extra, start)


def _draft_vocab(c: TrainConfig, inputs: _Inputs, shards: Sequence[Any]) -> Any:
    counts = count_tokens(shards, inputs.cfg.n_vocab)
    if c.keep_vocab:
        vocab = source_vocab(inputs.start, counts)
    else:
        vocab = build_vocab(counts, min(c.draft_vocab, inputs.cfg.n_vocab))
    save_vocab(vocab, Path(c.out) / "vocab.npz")
    return vocab


def checkpoint_meta(c: TrainConfig, vocab: Any, sequences: int, warm: Any = None) -> dict[str, Any]:
    """The settings a checkpoint records and a resumed run must match (homespec.train.checkpoint):
    the keys runs have always written, so that every earlier run still resumes."""
    meta = {"epochs": c.epochs, "ttt_steps": c.ttt_steps, "lr": c.lr, "batch_tokens": c.batch_tokens, "seed": c.seed,
            "eagle3": c.eagle3, "draft_vocab": vocab.size, "vocab_sum": int(vocab.ids.sum()), "sequences": sequences}
    if c.freeze_lm_head or c.hidden_weight or c.weight_decay:  # (older checkpoints lack these keys)
        meta.update(freeze_lm_head=c.freeze_lm_head, hidden_weight=c.hidden_weight, weight_decay=c.weight_decay)
    if warm is not None:  # a resumed run must start from the same head
        meta["init"] = warm.digest
    return meta


def _train_and_export(c: TrainConfig, inputs: _Inputs, head: Any, frozen: Any, shards: Sequence[Any], vocab: Any,
                      warm: Any, progress: ProgressFn | None) -> tuple[Any, int]:
    """Train (resuming OUT/train/checkpoint.pt), then export the head with its acceptance on the
    dev prompts for the default GPU tree and CPU chain (the guard's prior, homespec.formats.acceptance).
    -> (the final TrainState, the exported head's bytes)"""
    out = Path(c.out)
    refs = sequence_refs(shards, max_len=max(64, c.batch_tokens // 2))
    if not refs:
        raise HomespecError("the generated data holds no reply tokens to train on", hint="raise --tokens or --max-new-tokens")
    # the longest training sequence: the drafter's default attention window (Eagle3Config.draft_window)
    head.config = replace(head.config, draft_window=max(r.length for r in refs))
    meta = checkpoint_meta(c, vocab, len(refs), warm)
    meter = None
    if c.eval_prompts:
        meter = AcceptanceMeter(inputs.target, load_prompts("dev")[:c.eval_prompts], backend=inputs.backend,
                                device=c.device)
    try:
        def evaluate(h: Any) -> dict[str, float]:
            a = meter.measure(h)
            return {"tau": a.tau, "spec_steps": a.steps}

        state = train(head, frozen, shards, refs, c, checkpoint=out / "train" / "checkpoint.pt", meta=meta,
                      evaluate=evaluate if meter else None, progress=progress)
        write_text(out / "train" / "history.json", json.dumps(state.history, indent=1) + "\n")
        head_bytes = export_head(head, out)
        if meter is not None:
            meter.record(head, out, [GPU_DRAFT, CPU_DRAFT], split="dev", backend=inputs.backend)
    finally:
        if meter is not None:
            meter.close()
    return state, head_bytes
