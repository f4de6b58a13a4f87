"""Which GGUF of a repo `org/repo[:QUANT]` means: llama.cpp's `-hf` rule, made strict where it guesses.

llama.cpp (common/download.cpp, find_best_model / get_gguf_split_info):
  * a model file is a `.gguf` whose name holds none of mmproj, imatrix, mtp-, eagle3-, dflash-, dspark-;
  * a split model is `PREFIX-00001-of-0000N.gguf`; only its first part is a choice, and running it
    needs all N parts (llama.cpp loads the rest from beside the first);
  * the quant tag of a file is the last `[-.]TAG` of its name before the split suffix (upper-cased);
  * `:TAG` picks the first model file whose path matches `TAG[.-]` (case-insensitive);
  * no tag: Q4_K_M, else Q8_0, else the first model file.

homespec differs in one place: where llama.cpp takes "the first" of several different model files
matching, homespec lists them and asks (a repo with `model-Q4_K_M.gguf` and
`model-abliterated-Q4_K_M.gguf` holds two models, not one).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from homespec.errors import UsageError

_SPLIT = re.compile(r"^(.+)-([0-9]{5})-of-([0-9]{5})$", re.IGNORECASE)
_TAG = re.compile(r"[-.]([A-Z0-9_]+)$", re.IGNORECASE)
_NOT_MODELS = ("mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-")
DEFAULT_TAGS = ("Q4_K_M", "Q8_0")


@dataclass(frozen=True, slots=True)
class SplitInfo:
    prefix: str  # the path without .gguf and without the split suffix
    tag: str  # upper-cased quant tag, "" when the name carries none
    index: int
    count: int


def split_info(path: str) -> SplitInfo | None:
    """llama.cpp's get_gguf_split_info: None for a path that is not a .gguf."""
    if not path.lower().endswith(".gguf"):
        return None
    prefix, index, count = path[: -len(".gguf")], 1, 1
    m = _SPLIT.match(prefix)
    if m:
        prefix, index, count = m.group(1), int(m.group(2)), int(m.group(3))
    t = _TAG.search(prefix)
    return SplitInfo(prefix, t.group(1).upper() if t else "", index, count)


def is_model_file(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return name.lower().endswith(".gguf") and not any(word in name for word in _NOT_MODELS)


def parts_of(first: str, files: list[str]) -> list[str]:
    """Every part of the split model that `first` begins (just `first` when it is not split)."""
    info = split_info(first)
    if info is None or info.count <= 1:
        return [first]
    return [f"{info.prefix}-{i:05d}-of-{info.count:05d}.gguf" for i in range(1, info.count + 1)]


def choices(files: list[str]) -> list[str]:
    """The model files a user can pick: the first part of each split model, every whole file."""
    out = []
    for f in files:
        info = split_info(f)
        if info is not None and is_model_file(f) and info.index == 1:
            out.append(f)
    return out


def _describe(files: list[str], sizes: dict[str, int] | None) -> str:
    def one(f: str) -> str:
        if not sizes:
            return f
        total = sum(sizes.get(p, 0) for p in parts_of(f, files))
        return f"{f} ({total / 2**30:.1f} GiB)" if total else f

    shown = [one(f) for f in files[:8]]
    return ", ".join(shown) + (f" and {len(files) - 8} more" if len(files) > 8 else "")


def pick_file(repo: str, files: list[str], tag: str | None, sizes: dict[str, int] | None = None) -> str:
    """The GGUF (first part, for a split model) that `repo[:tag]` names; UsageError listing the
    choices when there is none or more than one."""
    models = choices(files)
    if not models:
        raise UsageError(f"{repo} holds no GGUF model file",
                         hint="pick a repo with .gguf files (often named ...-GGUF), or name a file: org/repo/file.gguf")
    for t in ([tag] if tag else list(DEFAULT_TAGS)):
        pattern = re.compile(re.escape(t) + r"[.-]", re.IGNORECASE)
        hits = [f for f in models if pattern.search(f)]
        if len(hits) == 1:
            return hits[0]
        if hits:
            raise UsageError(f"{repo}:{t} matches {len(hits)} files: {_describe(hits, sizes)}",
                             hint=f"name one file: {repo}/{hits[0]}")
    if tag:
        tags = sorted({info.tag for f in models if (info := split_info(f)) and info.tag})
        raise UsageError(f"{repo} has no {tag} file; it has: {', '.join(tags) or _describe(models, sizes)}",
                         hint=f"pick one, e.g. {repo}:{tags[0] if tags else 'Q4_K_M'}, or name a file: {repo}/FILE.gguf")
    if len(models) == 1:
        return models[0]
    raise UsageError(f"{repo} holds {len(models)} GGUF models and none is Q4_K_M or Q8_0: {_describe(models, sizes)}",
                     hint=f"pick a quant, e.g. {repo}:{split_info(models[0]).tag or 'Q4_K_M'}, or name a file")


def quant_bits(path: str) -> int:
    """The bit width in a file's quant tag (Q4_K_M -> 4, BF16 -> 16; 0 without one)."""
    info = split_info(path)
    m = re.search(r"\d+", info.tag) if info is not None else None
    return int(m.group()) if m else 0


def best_sibling(files: list[str], model: str, keyword: str, tag: str | None = None) -> str | None:
    """The sidecar (`keyword`: "eagle3-") llama.cpp's -hf fetches beside `model` (common/download.cpp
    find_best_sibling): a .gguf naming the keyword in the model's folder or one above it, the deepest
    first, then one whose name carries the model's quant tag, then the nearest in bits."""
    model_dir = model.split("/")[:-1]
    want = quant_bits(f"x-{tag}.gguf") if tag else quant_bits(model)
    best, best_key = None, None
    for f in files:
        if not f.endswith(".gguf") or keyword not in f:
            continue
        sib_dir = f.split("/")[:-1]
        if model_dir[: len(sib_dir)] != sib_dir:
            continue
        exact = bool(tag) and f"-{tag.upper()}." in f.upper()
        key = (-len(sib_dir), not exact, abs(quant_bits(f) - want))
        if best_key is None or key < best_key:
            best, best_key = f, key
    return best
