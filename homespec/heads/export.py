"""`homespec draft export`: one head, written for another engine (docs/interop.md).

Formats: `gguf` (llama.cpp's eagle3 architecture, homespec/heads/gguf.py), `speculators`
(vLLM's speculators layout, homespec/heads/speculators.py) and `hf` (the published EAGLE-3
layout homespec itself reads: the way to keep a head's EAGLE-3 twin and measure it in homespec).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from homespec import userfiles
from homespec.backends.llamacpp.exports import runs_eagle31
from homespec.backends.llamacpp.lib import import_llama_cpp
from homespec.backends.tokenizer import load_tokenizer
from homespec.embedded import smollm2_path
from homespec.errors import HomespecError, UsageError
from homespec.formats.eagle import draft_spec_from_checkpoint
from homespec.heads import gguf, speculators
from homespec.heads.check import compare_chains
from homespec.heads.twin import calibration_features, eagle3_twin, fc_norm_scales

FORMATS = ("gguf", "speculators", "hf")
DTYPES = ("f32", "f16", "bf16")
GGUF_DTYPES = (*DTYPES, "q8_0")  # q8_0: gguf-py's quantizer, the matrices only


@dataclass(frozen=True, slots=True)
class ExportResult:
    out: Path
    format: str
    kind: str  # "eagle3", "eagle3.1" or "eagle3-twin"
    bytes: int
    fc_norm_scales: tuple[float, ...] | None = None  # the twin's fit (homespec/heads/twin.py)
    check: list[Any] = field(default_factory=list)  # ChainPair per context, gguf only

    def to_dict(self) -> dict[str, Any]:
        return {"out": str(self.out), "format": self.format, "kind": self.kind, "bytes": self.bytes,
                "fc_norm_scales": None if self.fc_norm_scales is None else list(self.fc_norm_scales),
                "check": [{"context_len": p.context_len, "homespec": p.homespec, "llamacpp": p.llamacpp,
                           "agree": p.agree} for p in self.check]}


def check_args(fmt: str, out: str, dtype: str | None) -> None:
    """Usage errors, before any weights load."""
    if fmt not in FORMATS:
        raise UsageError(f"unknown export format {fmt!r}", hint=f"use one of: {', '.join(FORMATS)}")
    allowed = GGUF_DTYPES if fmt == "gguf" else DTYPES
    if dtype is not None and dtype not in allowed:
        raise UsageError(f"unknown dtype {dtype!r} for --format {fmt}", hint=f"use one of: {', '.join(allowed)}")
    p = Path(out)
    if fmt == "gguf" and (p.is_dir() or out.endswith(("/", os.sep))):
        raise UsageError(f"--out {out} is a directory; a GGUF is one file", hint=f"e.g. --out {p / 'head.gguf'}")
    if fmt != "gguf" and p.is_file():
        raise UsageError(f"--out {out} is a file; the {fmt} layout is a directory", hint="name a new or empty directory")
    # where the file or directory would be made, checked before any work: a folder this process may
    # write in (not under a file, not read-only), and no FIFO or device in the way
    userfiles.writable(out, "--out", "head.gguf" if fmt == "gguf" else "head", directory=fmt != "gguf")


def export_head(head_dir: str, fmt: str, out: str, *, target: str | None = None, twin: bool = False,
                force: bool = False, dtype: str | None = None, check: bool = True, verifier: str | None = None,
                say: Callable[[str], None] = lambda _m: None) -> ExportResult:
    """Load the head against its target, make its EAGLE-3 twin if asked, write `fmt` to `out`."""
    from homespec.nets.eagle3 import load_head  # torch: loaded after the arguments are checked

    check_args(fmt, out, dtype)
    spec = draft_spec_from_checkpoint(head_dir)
    if fmt == "gguf" and check and not twin and (spec.fc_norm or spec.norm_output):
        _need_patched_build(head_dir)
    if twin and not (spec.fc_norm or spec.norm_output):
        raise UsageError(f"{head_dir} is already an EAGLE-3 head: it has no twin", hint="drop --eagle3-twin")
    out_p = Path(out)
    if fmt == "gguf":
        gguf.check_overwrite(out_p, force, gguf.is_exported_gguf)
    else:
        speculators.check_overwrite(out_p, force)
    target_path = str(target or smollm2_path())
    header = gguf.read_target(target_path)
    head = load_head(head_dir, header.n_layer, header.n_embd, header.n_vocab)
    dtype = dtype or (spec.dtype if spec.dtype in DTYPES else "f32")
    kind, scales = ("eagle3.1" if head.config.fc_norm or head.config.norm_output else "eagle3"), None
    if twin:
        if head.config.fc_norm:
            say("calibrating the EAGLE-3 twin's feature norm on the target's features (dev prompts)")
            feats = calibration_features(target_path, head.config.feature_layers(header.n_layer))
            scales = tuple(float(s) for s in fc_norm_scales(feats, head.config.rms_norm_eps))
        head, kind = eagle3_twin(head, scales), "eagle3-twin"
    name = f"{Path(head_dir).resolve().name}{'-eagle3-twin' if twin else ''}"
    try:
        size, pairs = _write(head, header, fmt, out_p, dtype, name, check, target_path, verifier, say)
    except OSError as e:  # a disk that fills on the way: one line, the half-written file gone
        raise userfiles.write_error(e, out, "--out") from None
    return ExportResult(out_p, fmt, kind, size, scales, pairs)


def _write(head: Any, header: Any, fmt: str, out_p: Path, dtype: str, name: str, check: bool, target_path: str,
           verifier: str | None, say: Callable[[str], None]) -> tuple[int, list[Any]]:
    """Write the head as `fmt` to `out_p` (a GGUF checked against llama.cpp first) -> (bytes, check pairs)."""
    pairs: list[Any] = []
    if fmt == "gguf":
        # written and checked beside --out, then renamed: a file that fails the check replaces nothing
        tmp = out_p.with_name(f".{out_p.name}.unchecked")
        try:
            size = gguf.write_eagle3_gguf(head, header, tmp, dtype=dtype, name=name)
            if check:
                pairs = _check(head, target_path, tmp, say)
            os.replace(tmp, out_p)
        finally:
            tmp.unlink(missing_ok=True)
    else:
        size = speculators.write(head, out_p, fmt=fmt, dtype=dtype, target=target_path,
                                 layers=head.config.feature_layers(header.n_layer), name=name,
                                 verifier=verifier, arch=header.arch)
    return size, pairs


def _need_patched_build(head_dir: str) -> None:
    """The check of a 3.1 file drafts with it in llama.cpp: the installed build must carry the patch."""
    import_llama_cpp()
    if not runs_eagle31():
        raise UsageError(f"{head_dir} is an EAGLE-3.1 head and the installed llama.cpp lacks homespec's EAGLE-3.1 "
                         "patch, so the export cannot be checked",
                         hint="run `bash scripts/setup.sh` (it builds the patch in), add --no-check, or export "
                              "the head's EAGLE-3 twin with --eagle3-twin")


def _check(head: Any, target: str, out: Path, say: Callable[[str], None]) -> list[Any]:
    """llama.cpp drafts with the written file what homespec drafts with the head, or the file goes."""
    say("checking that llama.cpp drafts with the file what homespec drafts with the head")
    tok = load_tokenizer(target)
    texts = ("The capital of France is", "def add(a, b):\n    return", "Once upon a time, there was a")
    pairs = compare_chains(head, target, out, [tok.encode(t) for t in texts], k=4)
    # a divergence is tolerated only where llama.cpp's top two logits are a float hair apart
    bad = [p for p in pairs if p.agree < len(p.homespec) and p.margin > 0.05]
    if bad:
        p = bad[0]
        raise HomespecError(f"llama.cpp drafts {p.llamacpp} where homespec drafts {p.homespec}: the export "
                            "would draft wrongly and was not written", hint="report this with the head's config.json")
    return pairs
