"""`homespec draft train`: data by self-distillation, draft vocabulary, training-time test, export.

    OUT/homespec-run.json   written first: the directory is a training run (homespec.train.rundir)
    OUT/data/         shards + manifest (homespec.train.shards), resumable
    OUT/vocab.npz     the draft vocabulary
    OUT/train/        checkpoint.pt (resumable) and history.json (loss, accuracy, held-out tau)
    OUT/config.json + OUT/model.safetensors   the head, in the published EAGLE-3 layout
    OUT/acceptance.json   its acceptance on the dev prompts (homespec.speculative.record), when measured

Every stage resumes: rerunning the same command skips finished shards and continues training
from the last checkpoint. With `init`, training starts from an existing head's weights
(homespec.train.warm) instead of a fresh head.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from homespec.atomic import write_text
from homespec.errors import HomespecError, UsageError
from homespec.train.data import DataSummary, generate_data, target_settings
from homespec.train.progress import ProgressFn
from homespec.train.rundir import check_out, claim_out
from homespec.train.shards import load_shards


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
    from homespec.models.config import read_gguf_config, read_hf_config

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
    import torch

    p = Path(target)
    if p.is_dir():
        from homespec.models.load import read_hf_tensors

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


def _check_numbers(tokens: int, epochs: int, ttt_steps: int, max_new_tokens: int, draft_vocab: int,
                   hidden_weight: float) -> None:
    for flag, v, least, example in (("--tokens", tokens, 1, "500000"), ("--epochs", epochs, 1, "2"),
                                    ("--ttt-steps", ttt_steps, 1, "5"), ("--max-new-tokens", max_new_tokens, 1, "256"),
                                    ("--draft-vocab", draft_vocab, 2, "8192"),
                                    ("--hidden-weight", hidden_weight, 0, "1.0, or 0 to switch it off")):
        if v < least:
            raise UsageError(f"{flag} must be at least {least}, got {v}", hint=f"e.g. {flag} {example}")


def head_config(cfg: Any, draft_vocab: int, eagle3: bool):
    from homespec.models.eagle3 import Eagle3Config

    return Eagle3Config(
        hidden_size=cfg.n_embd, num_attention_heads=cfg.n_head, num_key_value_heads=cfg.n_head_kv,
        head_dim=cfg.head_dim, intermediate_size=cfg.n_ff, vocab_size=cfg.n_vocab, draft_vocab_size=draft_vocab,
        target_hidden_size=cfg.n_embd, rms_norm_eps=cfg.rms_eps, rope_theta=cfg.rope_theta,
        rope_scaling=cfg.rope_scaling, max_position_embeddings=cfg.max_context,
        fc_norm=not eagle3, norm_output=not eagle3,
    )


def train_head(
    *,
    target: str | os.PathLike[str],
    out: str | os.PathLike[str],
    prompts: str | os.PathLike[str] | None = None,
    tokens: int = 500_000,
    epochs: int = 4,
    device: str = "cpu",
    draft_vocab: int = 8192,
    ttt_steps: int = 5,
    seed: int = 0,
    max_new_tokens: int = 256,
    backend: str | None = None,
    eagle3: bool = False,
    parallel: int = 16,
    n_threads: int | None = None,
    batch_tokens: int = 4096,
    lr: float = 5e-4,
    freeze_lm_head: bool = False,
    hidden_weight: float = 0.0,
    weight_decay: float = 0.0,
    eval_prompts: int = 4,
    eval_every: int = 500,
    checkpoint_every: int = 200,
    shard_prompts: int = 64,
    skip_shards: int = 0,
    init: str | os.PathLike[str] | None = None,
    keep_vocab: bool = False,
    data_from: Sequence[str | os.PathLike[str]] = (),
    progress: ProgressFn | None = None,
) -> TrainResult:
    """Train an EAGLE-3.1 head (EAGLE-3 with eagle3=True) for `target`; see the module docstring."""
    import torch

    from homespec.models.eagle3 import Eagle3Head
    from homespec.prompts import load_prompts, read_prompts_file
    from homespec.train.batches import sequence_refs
    from homespec.train.evaluate import AcceptanceMeter
    from homespec.train.export import export_head
    from homespec.train.loop import TrainConfig, train
    from homespec.train.ttt import Frozen, init_lm_head
    from homespec.train.vocab import build_vocab, count_tokens, save_vocab

    target, out = os.fspath(target), Path(out)
    _check_numbers(tokens=tokens, epochs=epochs, ttt_steps=ttt_steps, max_new_tokens=max_new_tokens,
                   draft_vocab=draft_vocab, hidden_weight=hidden_weight)
    # the output directory first (reads only): before any data is generated or any model loaded
    if init is not None and Path(init).resolve() == out.resolve():
        raise UsageError(f"--init {init} is the output directory: the new head would overwrite the one it starts from",
                         hint="write the new head to another --out")
    check_out(out)
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError("--device cuda but torch sees no CUDA GPU", hint="use --device cpu")
    cfg = read_target_config(target)
    backend = backend or ("torch" if Path(target).is_dir() else "llamacpp")
    if backend == "llamacpp" and Path(target).is_dir():
        raise UsageError("llama.cpp reads GGUF files, the target is a directory", hint="use --backend torch")
    items = read_prompts_file(prompts) if prompts else load_prompts("train")
    layers = cfg.default_feature_layers()
    extra = _read_data_from(data_from, out, target, layers)  # checked before hours of generation
    start = None
    if init is not None:  # checked before hours of data generation, not after
        from homespec.train.warm import read_source, warm_start

        start = read_source(init, cfg, head_config(cfg, draft_vocab, eagle3))
    elif keep_vocab:
        raise UsageError("--keep-vocab keeps the draft vocabulary of the --init head, and there is none",
                         hint="add --init DIR, or drop --keep-vocab")
    claim_out(out)  # every check passed: the run's marker is its first write

    # 1. data: the target answers the prompts
    data = generate_data(target, out / "data", items, tokens=tokens, max_new_tokens=max_new_tokens, seed=seed,
                         feature_layers=layers, backend=backend, parallel=parallel, shard_prompts=shard_prompts,
                         skip_shards=skip_shards, n_threads=n_threads,
                         device=device if backend == "torch" else None, progress=progress)
    manifest, shards = load_shards(out / "data")
    shards = shards + [sh for _, more in extra for sh in more]

    # 2. draft vocabulary: the most frequent reply tokens, or with keep_vocab the --init head's own
    counts = count_tokens(shards, cfg.n_vocab)
    if keep_vocab:
        from homespec.train.warm import source_vocab

        vocab = source_vocab(start, counts)
    else:
        vocab = build_vocab(counts, min(draft_vocab, cfg.n_vocab))
    save_vocab(vocab, out / "vocab.npz")

    # 3. head, frozen target tables, training-time test
    torch.manual_seed(seed)
    head = Eagle3Head(head_config(cfg, vocab.size, eagle3))
    head.d2t.copy_(torch.from_numpy(vocab.d2t))
    head.t2d.copy_(torch.from_numpy(vocab.t2d))
    embed, output = target_tables(target)
    frozen = Frozen(embed, output, torch.from_numpy(vocab.ids))
    init_lm_head(head, frozen)
    warm = None if start is None else warm_start(head, start, cfg, vocab.ids)
    tc = TrainConfig(epochs=epochs, ttt_steps=ttt_steps, lr=lr, batch_tokens=batch_tokens, seed=seed, device=device,
                     freeze_lm_head=freeze_lm_head, hidden_weight=hidden_weight, weight_decay=weight_decay,
                     eval_every=eval_every if eval_prompts else 0, checkpoint_every=checkpoint_every)
    refs = sequence_refs(shards, max_len=max(64, batch_tokens // 2))
    if not refs:
        raise HomespecError("the generated data holds no reply tokens to train on", hint="raise --tokens or --max-new-tokens")
    # the longest training sequence: the drafter's default attention window (Eagle3Config.draft_window)
    head.config = replace(head.config, draft_window=max(r.length for r in refs))
    meta = {"epochs": epochs, "ttt_steps": ttt_steps, "lr": lr, "batch_tokens": batch_tokens, "seed": seed,
            "eagle3": eagle3, "draft_vocab": vocab.size, "vocab_sum": int(vocab.ids.sum()), "sequences": len(refs)}
    if freeze_lm_head or hidden_weight or weight_decay:  # (older checkpoints lack these keys)
        meta.update(freeze_lm_head=freeze_lm_head, hidden_weight=hidden_weight, weight_decay=weight_decay)
    if warm is not None:  # a resumed run must start from the same head
        meta["init"] = warm.digest
    meter = None
    if eval_prompts:
        from homespec.prompts import load_prompts as _lp

        meter = AcceptanceMeter(target, _lp("dev")[:eval_prompts], backend=backend, device=device)
    try:
        def evaluate(h: Any) -> dict[str, float]:
            a = meter.measure(h)
            return {"tau": a.tau, "spec_steps": a.steps}

        state = train(head, frozen, shards, refs, tc, checkpoint=out / "train" / "checkpoint.pt", meta=meta,
                      evaluate=evaluate if meter else None, progress=progress)
        write_text(out / "train" / "history.json", json.dumps(state.history, indent=1) + "\n")

        # 4. export in the published layout, with the head's acceptance on the dev prompts for
        # the default GPU tree and CPU chain (the guard's prior, homespec.speculative.record)
        head_bytes = export_head(head, out)
        if meter is not None:
            from homespec.session.options import CPU_DRAFT, GPU_DRAFT

            meter.record(head, out, [GPU_DRAFT, CPU_DRAFT], split="dev", backend=backend)
    finally:
        if meter is not None:
            meter.close()
    losses = [r["loss"] for r in state.history if "loss" in r]
    taus = [r["tau"] for r in state.history if "tau" in r]
    return TrainResult(out, data, vocab.size, vocab.coverage, state.step, losses[-1] if losses else None,
                       taus[-1] if taus else None, head_bytes, warm)
