"""Warm start: begin training from an existing head of the same target (`draft train --init DIR`).

Every weight of the head is copied except the draft read-out, whose rows belong to tokens: the
new run's draft vocabulary (built from its own data) keeps the old head's row for each token both
vocabularies hold, and starts a token new to it from the target's own output row (init_lm_head).
So a head trained on a smaller data set goes on learning from a larger one instead of starting
again, and a user can adapt a published head to their own prompts. With `--keep-vocab` the new run
keeps the source head's draft vocabulary instead (source_vocab): every row carries over, and tokens
the new data happens to lack (a rare emoji's byte tokens, say) stay proposable.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from homespec import userfiles
from homespec.errors import UsageError
from homespec.nets.eagle3 import Eagle3Head, load_head
from homespec.train.vocab import vocab_of

_ROWS = ("lm_head.weight", "d2t", "t2d", "embed_tokens.weight")


@dataclass(frozen=True, slots=True)
class Source:
    head: Any  # the Eagle3Head to start from
    path: Path
    digest: str  # sha256 of its weights file: a resumed run must start from the same head


@dataclass(frozen=True, slots=True)
class WarmStart:
    source: Path
    digest: str
    rows_kept: int  # draft read-out rows carried over (tokens in both draft vocabularies)
    rows_new: int  # rows started from the target's output (tokens new to the draft vocabulary)


def weights_digest(directory: str | os.PathLike[str]) -> str:
    d = Path(directory)
    path = d / "model.safetensors" if (d / "model.safetensors").is_file() else d / "pytorch_model.bin"
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_source(source: str | os.PathLike[str], cfg: Any, config: Any) -> Source:
    """Load the head to start from and check it before any data is generated: a head of this
    target (load_head's checks), of the kind this run trains, shaped as `config` (this run's head
    config; the draft vocabulary aside, which warm_start maps token by token)."""

    src = Path(source)
    hint = "name the directory of an EAGLE-3 head (config.json + model.safetensors), e.g. a finished run's --out"
    if not (src / "config.json").exists():  # a missing path or a file: one line naming --init
        what = "a file, not a head directory" if src.is_file() else "no head there (no config.json)"
        raise UsageError(f"--init {src}: {what}", hint=hint)
    userfiles.regular(str(src / "config.json"), "--init", userfiles.CONFIG)  # a FIFO or a folder: by what it is
    old = load_head(src, cfg.n_layer, cfg.n_embd, cfg.n_vocab)
    if (old.config.fc_norm, old.config.norm_output) != (config.fc_norm, config.norm_output):
        kind = "EAGLE-3.1" if config.fc_norm else "plain EAGLE-3"
        raise UsageError(f"--init {src}: that head is not {kind}, the kind this run trains",
                         hint="drop --eagle3" if not config.fc_norm else "add --eagle3")
    with torch.device("meta"):  # shapes only: no memory for a head that is never used
        mine = Eagle3Head(replace(config, draft_vocab_size=old.config.draft_vocab_size)).state_dict()
    theirs = old.state_dict()
    for key, ref in mine.items():
        w = theirs.get(key)
        if key not in _ROWS and (w is None or tuple(w.shape) != tuple(ref.shape)):
            got = "missing" if w is None else f"shaped {tuple(w.shape)}"
            raise UsageError(f"--init {src}: {key} is {got}, this run's head needs {tuple(ref.shape)}",
                             hint="warm-start from a head trained for this target with the same settings")
    return Source(old, src, weights_digest(src))


def warm_start(head: Any, source: Source, cfg: Any, draft_ids: Any) -> WarmStart:
    """Copy the source head's weights into `head` (shaped as read_source checked), a fresh head
    whose lm_head already holds the target's rows of `draft_ids`, the new draft vocabulary's ids."""
    old = source.head
    with torch.no_grad():
        theirs = old.state_dict()
        for key, ref in head.state_dict().items():
            if key not in _ROWS:
                ref.copy_(theirs[key].to(ref.dtype))
        row_of = torch.full((cfg.n_vocab,), -1, dtype=torch.long)
        row_of[old.draft_to_target] = torch.arange(old.config.draft_vocab_size)
        rows = row_of[torch.as_tensor(draft_ids).long()]
        keep = rows >= 0
        head.lm_head.weight[keep] = old.lm_head.weight[rows[keep]].to(head.lm_head.weight.dtype)
    kept = int(keep.sum())
    return WarmStart(source.path, source.digest, kept, int(keep.numel()) - kept)


def source_vocab(source: Source, counts: Any) -> Any:
    """The source head's draft vocabulary as a DraftVocab, its coverage measured on `counts`
    (occurrences per target id in the new run's data)."""
    return vocab_of(source.head.draft_to_target.cpu().numpy(), counts)
