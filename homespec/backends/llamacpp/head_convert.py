"""Every EAGLE head homespec can load, as an eagle3 GGUF that llama.cpp runs beside its target:
converted once, cached by content.

`head_gguf(head, target_gguf, dtype=..., patched=...)` is what a run calls before it loads the
head into llama.cpp. It imports no torch (torch and a CUDA build of llama.cpp crash in one
process: docs/gpu.md), reads the head with numpy (homespec.nets.eagle3_files: homespec's own
layout, the original EAGLE-3 one, speculators 3.0/3.1) and writes it with
homespec.backends.llamacpp.head_gguf. The file is cached under
`${XDG_CACHE_HOME:-~/.cache}/homespec/heads-gguf/`, named by a hash of the head's files, the
target's identity (its depth, width and tokenizer), the dtype, the head's kind and the format
version, so a second run reuses it and a changed head, target tokenizer or writer converts again.
File hashes are remembered per file (path, size, mtime, inode) so a cache hit reads no weights.

An EAGLE-3.1 head needs homespec's patch in llama.cpp (kernels/llamacpp/eagle3.1.patch; detected
with homespec.backends.llamacpp.exports). Without it the head's EAGLE-3 twin is converted instead
(homespec.backends.llamacpp.head_twin: its fc_norm fit reads the target's features from llama.cpp)
and `Converted.note` says so in one line. An eagle3 `.gguf` given directly (a llama.cpp sidecar,
`homespec draft export` output) is checked against the target and used as it is.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from homespec.atomic import write_text
from homespec.backends.llamacpp.exports import runs_eagle31
from homespec.backends.llamacpp.head_gguf import (
    ARCH, DRAFT_SINKS, FC_NORM_KEY, NORM_OUTPUT_KEY, SINKS_KEY, TOKENIZER_ARRAYS, WINDOW_KEY, read_target,
    write_eagle3_gguf,
)
from homespec.backends.llamacpp.head_twin import calibration_features, fc_norm_scales, twin_of
from homespec.errors import FormatError, HomespecError, UsageError
from homespec.formats.eagle import draft_spec_from_checkpoint
from homespec.formats.gguf import ArrayInfo, read_gguf_header
from homespec.nets.eagle3_files import head_files, read_head

FORMAT_VERSION = 1  # bump when what the writer puts in a file changes: older cache entries are not reused
DRAFT_DTYPES = ("f16", "q8_0")  # --draft-dtype
# docs/interop.md, "Draft dtype": q8_0 kept tokens per pass within 0.2 % of f16 on homespec's prompts
# (the 1 % the default may lose) at 57 % of the bytes
DEFAULT_DTYPE = "q8_0"
Features = Callable[[Sequence[int]], np.ndarray]  # target layers -> [N, 3*H] calibration features


@dataclass(frozen=True, slots=True)
class Converted:
    path: Path  # the eagle3 GGUF to load as the draft model
    kind: str  # "eagle3", "eagle3.1", "eagle3-twin" (a 3.1 head run as its twin) or "gguf" (given as one)
    note: str | None  # one line for the user (the twin), else None
    cached: bool  # found in the cache: nothing was converted
    window: int | None  # the head's attention window (homespec.draft_window); None: full attention
    sinks: int  # entries at the start that stay visible with the window


@dataclass(frozen=True, slots=True)
class TargetShape:
    """What a head is checked against, and the identity its conversion is cached under."""

    arch: str
    n_layer: int
    n_embd: int
    n_vocab: int
    digest: str  # of depth, width and every tokenizer.* key


def cache_root() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "homespec" / "heads-gguf"


def head_gguf(head: str | os.PathLike[str], target_gguf: str | os.PathLike[str], *, dtype: str = DEFAULT_DTYPE,
              patched: bool | None = None, features: Features | None = None,
              cache_dir: str | os.PathLike[str] | None = None) -> Converted:
    """The eagle3 GGUF to draft with `head` (a head directory or an eagle3 .gguf) beside the target.

    patched: whether the llama.cpp that will load it runs EAGLE-3.1 (None: ask the installed one,
    homespec.backends.llamacpp.exports.runs_eagle31). features: the target's features at given
    layers on calibration text, for a twin's fc_norm fit (None: decoded here with llama.cpp)."""
    if dtype not in DRAFT_DTYPES:
        raise UsageError(f"--draft-dtype {dtype} is not one of {', '.join(DRAFT_DTYPES)}",
                         hint="f16 keeps the head's acceptance; q8_0 halves its memory")
    if patched is None:
        patched = runs_eagle31()
    root = Path(cache_dir) if cache_dir is not None else cache_root()
    p, target = Path(head), target_shape(Path(target_gguf), root)
    if p.is_file() and p.suffix.lower() == ".gguf":
        return _given_gguf(p, target, patched)
    if not p.is_dir():
        raise UsageError(f"--draft {p}: no EAGLE head there", hint="pass an EAGLE-3 head's directory or an eagle3 .gguf")
    return _converted(p, Path(target_gguf), target, dtype, patched, features, root)


def _converted(p: Path, target_gguf: Path, target: TargetShape, dtype: str, patched: bool, features: Features | None,
               root: Path) -> Converted:
    spec = draft_spec_from_checkpoint(p)
    kind = "eagle3" if not (spec.fc_norm or spec.norm_output) else "eagle3.1" if patched else "eagle3-twin"
    key = hashlib.sha256(json.dumps([FORMAT_VERSION, kind, dtype, target.digest,
                                     [file_digest(f, root) for f in head_files(p)]]).encode()).hexdigest()
    out = root / f"{p.resolve().name}-{kind}-{dtype}-{key[:16]}.gguf"
    note = (f"{p.name} is an EAGLE-3.1 head and this llama.cpp lacks homespec's EAGLE-3.1 patch: drafting with "
            "its EAGLE-3 twin, which accepts fewer tokens (docs/interop.md)") if kind == "eagle3-twin" else None
    if out.is_file():
        window = _window_of(out)
        return Converted(out, kind, note, True, window, DRAFT_SINKS if window else 0)
    config, tensors = _read_checked(p, target)
    if kind == "eagle3-twin":
        scales = None
        if config.fc_norm:
            layers = config.feature_layers(target.n_layer)
            feats = features(layers) if features is not None else calibration_features(target_gguf, layers)
            scales = [float(s) for s in fc_norm_scales(feats, config.rms_norm_eps)]
        config, tensors = twin_of(config, tensors, scales)

    write_eagle3_gguf(config, tensors, read_target(target_gguf), out, dtype=dtype, name=out.stem)
    window = config.draft_window
    return Converted(out, kind, note, False, window, DRAFT_SINKS if window else 0)


def _read_checked(p: Path, target: TargetShape) -> tuple[Any, dict[str, np.ndarray]]:
    """The head's config and tensors, checked against the target as homespec.nets.eagle3.load_head checks."""
    h = read_head(p)
    c = h.config
    if c.target_hidden_size != target.n_embd:
        raise HomespecError(f"{p}: the head reads {c.target_hidden_size}-wide target features, the target's "
                            f"hidden size is {target.n_embd}", hint="use a head trained for this target")
    if c.vocab_size != target.n_vocab:
        raise HomespecError(f"{p}: the head's target vocabulary is {c.vocab_size} tokens, the target has "
                            f"{target.n_vocab}", hint="use a head trained for this target")
    _check_layers(c.feature_layers(target.n_layer), target.n_layer, p)
    tensors = dict(h.tensors)
    if c.hidden_size == target.n_embd:
        tensors.pop("embed_tokens.weight", None)  # the target's embeddings serve, as in homespec's torch head
    elif "embed_tokens.weight" not in tensors:
        raise HomespecError(f"{p}: the head is {c.hidden_size} wide but the target's embeddings are {target.n_embd}",
                            hint="such a head must ship embed_tokens.weight")
    return c, tensors


def _check_layers(layers: Sequence[int], n_layer: int, where: Path) -> None:
    if len(layers) != 3 or min(layers) < 0 or max(layers) >= n_layer:
        raise HomespecError(f"{where}: the head reads target layers {list(layers)}, the target has {n_layer} layers",
                            hint="use a head trained for this target")


# --- an eagle3 GGUF given directly -------------------------------------------------------------------


def _given_gguf(p: Path, target: TargetShape, patched: bool) -> Converted:
    """An eagle3 GGUF checked against the target: architecture, target layers and width, vocabulary."""
    meta = read_gguf_header(p).metadata
    if meta.get("general.architecture") != ARCH:
        raise UsageError(f"--draft {p} is a {meta.get('general.architecture')!r} GGUF, not an eagle3 head",
                         hint="pass an eagle3 GGUF (a llama.cpp sidecar, homespec draft export) or a head directory")
    layers = meta.get(f"{ARCH}.target_layers")
    if not isinstance(layers, list):
        raise FormatError(f"{p}: no {ARCH}.target_layers", hint="the file is not a complete eagle3 head")
    _check_layers([int(i) for i in layers], target.n_layer, p)
    width = meta.get(f"{ARCH}.target_hidden_size")
    if width != target.n_embd:
        raise HomespecError(f"{p}: the head reads {width}-wide target features, the target's hidden size is "
                            f"{target.n_embd}", hint="use a head made for this target")
    tokens = meta.get("tokenizer.ggml.tokens")
    vocab = meta.get(f"{ARCH}.vocab_size") or (tokens.length if isinstance(tokens, ArrayInfo) else len(tokens or ()))
    if int(vocab) != target.n_vocab:
        raise HomespecError(f"{p}: the head's vocabulary is {vocab} tokens, the target has {target.n_vocab}",
                            hint="use a head made for this target")
    if (meta.get(FC_NORM_KEY) or meta.get(NORM_OUTPUT_KEY)) and not patched:
        raise HomespecError(f"{p} is an EAGLE-3.1 head and this llama.cpp lacks homespec's EAGLE-3.1 patch",
                            hint="run `bash scripts/setup.sh` (it builds llama.cpp with the patch), or pass the "
                                 "head's directory to draft with its EAGLE-3 twin")
    window = meta.get(WINDOW_KEY)
    sinks = meta.get(SINKS_KEY, DRAFT_SINKS) if window else 0
    return Converted(p, "gguf", None, True, int(window) if window else None, int(sinks))


def _window_of(path: Path) -> int | None:
    window = read_gguf_header(path).metadata.get(WINDOW_KEY)
    return int(window) if window else None


# --- identities, remembered per file --------------------------------------------------------------


def _remembered(path: Path, root: Path, kind: str, compute: Callable[[], dict]) -> dict:
    """`compute()` for this file's current (path, size, mtime, inode), computed once and kept."""
    st = path.stat()
    stamp = f"{kind}\0{path.resolve()}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}"
    memo = root / "ids" / (hashlib.sha1(stamp.encode()).hexdigest() + ".json")
    try:
        return json.loads(memo.read_text())
    except (OSError, ValueError):
        pass
    value = compute()

    write_text(memo, json.dumps(value))
    return value


def file_digest(path: Path, root: Path) -> str:
    """SHA-256 of a file's bytes (read once per version of the file)."""
    def compute() -> dict:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        return {"sha256": h.hexdigest()}

    return str(_remembered(path, root, "file", compute)["sha256"])


def target_shape(path: Path, root: Path) -> TargetShape:
    """The target's depth, width, vocabulary and an identity of its tokenizer (read once per file)."""
    if not path.is_file():
        raise UsageError(f"target {path} is not a file", hint="the EAGLE head drafts for a GGUF target")

    def compute() -> dict:
        meta = read_gguf_header(path, keep_arrays=TOKENIZER_ARRAYS).metadata
        arch = meta.get("general.architecture")
        n_layer, n_embd = meta.get(f"{arch}.block_count"), meta.get(f"{arch}.embedding_length")
        tokens = meta.get("tokenizer.ggml.tokens")
        if not arch or n_layer is None or n_embd is None or not isinstance(tokens, list):
            raise FormatError(f"{path}: no block_count, embedding_length or tokenizer in its header",
                              hint="pass the target model's own GGUF")
        tok = sorted((k, v) for k, v in meta.items() if k.startswith("tokenizer."))
        digest = hashlib.sha256(json.dumps([n_layer, n_embd, tok], default=str).encode()).hexdigest()
        return {"arch": arch, "n_layer": n_layer, "n_embd": n_embd, "n_vocab": len(tokens), "digest": digest}

    v = _remembered(path, root, "target", compute)
    return TargetShape(str(v["arch"]), int(v["n_layer"]), int(v["n_embd"]), int(v["n_vocab"]), str(v["digest"]))

