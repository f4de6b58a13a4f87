"""Self-distillation data on disk: one directory per shard of finished prompts, plus a manifest.

    DATA/manifest.json              settings + one entry per finished shard (rewritten atomically)
    DATA/shard-00003/tokens.npy     [N] int32    every position of every sequence, concatenated
                     offsets.npy    [S+1] int64  sequence s is rows offsets[s]:offsets[s+1]
                     features.npy   [N, 3*H] fp16 inputs of the head's three target layers
                     hidden.npy     [N, H] fp16   the target's final normed hidden state (result_norm)
                     generated.npy  [N] bool     the target wrote this token (a reply token)
                     prompts.npy    [S] int32    index of each sequence's prompt in the run's order

A shard directory is written under a temporary name and renamed into place, and the manifest
names only complete shards, so a killed run loses at most the shard it was writing. Arrays are
plain .npy so training can memory-map them.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from homespec.atomic import write_text
from homespec.errors import HomespecError

FORMAT_VERSION = 1
ARRAYS = ("tokens", "offsets", "features", "hidden", "generated", "prompts")


@dataclass(frozen=True, slots=True)
class Record:
    """One finished prompt: all its positions (prompt, replies, later user turns)."""

    prompt_index: int
    tokens: np.ndarray  # [T] int32
    features: np.ndarray  # [T, 3*H] fp16
    hidden: np.ndarray  # [T, H] fp16
    generated: np.ndarray  # [T] bool


@dataclass(frozen=True, slots=True)
class Shard:
    path: Path
    tokens: np.ndarray
    offsets: np.ndarray
    features: np.ndarray
    hidden: np.ndarray
    generated: np.ndarray
    prompts: np.ndarray

    @property
    def n_seq(self) -> int:
        return int(self.offsets.shape[0] - 1)


def shard_name(k: int) -> str:
    return f"shard-{k:05d}"


def write_shard(data_dir: Path, k: int, seqs: Sequence[Record]) -> Path:
    """Write shard k atomically (temp directory + rename)."""
    final = data_dir / shard_name(k)
    if final.exists():  # a shard the manifest does not list: left by a run killed after the rename
        shutil.rmtree(final)
    tmp = Path(tempfile.mkdtemp(dir=data_dir, prefix=f".{shard_name(k)}."))
    try:
        lengths = [len(s.tokens) for s in seqs]
        arrays = {
            "tokens": np.concatenate([s.tokens for s in seqs]).astype(np.int32),
            "offsets": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
            "features": np.concatenate([s.features for s in seqs]).astype(np.float16),
            "hidden": np.concatenate([s.hidden for s in seqs]).astype(np.float16),
            "generated": np.concatenate([s.generated for s in seqs]).astype(bool),
            "prompts": np.asarray([s.prompt_index for s in seqs], dtype=np.int32),
        }
        for name, arr in arrays.items():
            np.save(tmp / f"{name}.npy", arr)
        os.chmod(tmp, 0o755)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def read_shard(path: Path, mmap: bool = True) -> Shard:
    mode = "r" if mmap else None
    try:
        arrays = {name: np.load(path / f"{name}.npy", mmap_mode=mode) for name in ARRAYS}
    except (OSError, ValueError) as exc:
        raise HomespecError(f"{path}: cannot read this data shard ({exc})",
                            hint="delete the shard's directory and its manifest entry, then rerun to regenerate it") from exc
    return Shard(path=path, **arrays)


def read_manifest(data_dir: Path) -> dict[str, Any] | None:
    path = data_dir / "manifest.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise HomespecError(f"{path} is damaged ({exc})", hint="delete the data directory and generate again") from exc


def write_manifest(data_dir: Path, manifest: dict[str, Any]) -> None:
    write_text(data_dir / "manifest.json", json.dumps(manifest, indent=1) + "\n")


def load_shards(data_dir: str | os.PathLike[str]) -> tuple[dict[str, Any], list[Shard]]:
    """The manifest and its complete shards, memory-mapped."""
    data_dir = Path(data_dir)
    manifest = read_manifest(data_dir)
    if manifest is None or not manifest.get("shards"):
        raise HomespecError(f"{data_dir} holds no training data", hint="generate it first (homespec draft train does)")
    return manifest, [read_shard(data_dir / s["name"]) for s in manifest["shards"]]
