"""`homespec draft export`: a head for llama.cpp (GGUF), vLLM (speculators) or the EAGLE-3 layout."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Optional

import typer

from homespec.cli import lazy
from homespec.cli.app import draft_app


@draft_app.command("export")
def draft_export(
    head: Annotated[str, typer.Argument(help="The head: a directory in the EAGLE-3 (or speculators) layout.")],
    out: Annotated[str, typer.Option("--out", help="GGUF file (gguf), or a new or empty directory (speculators, hf).")],
    fmt: Annotated[str, typer.Option("--format", help="gguf (llama.cpp eagle3), speculators (vLLM) or hf (EAGLE-3 layout).")] = "gguf",
    target: Annotated[Optional[str], typer.Option("--target", help="The head's target GGUF (tokenizer, layers). Default: the embedded SmolLM2.")] = None,
    eagle3_twin: Annotated[bool, typer.Option("--eagle3-twin", help="Export the EAGLE-3 twin of an EAGLE-3.1 head (fc_norm folded, norm_output off; docs/interop.md).")] = False,
    dtype: Annotated[Optional[str], typer.Option("--dtype", help="f32, f16 or bf16 for the matrices (gguf also q8_0). Default: the head's own.")] = None,
    verifier: Annotated[Optional[str], typer.Option("--verifier", help="speculators: the target's HF name vLLM loads. Default: the embedded model's, else --target.")] = None,
    check: Annotated[bool, typer.Option("--check/--no-check", help="gguf: run llama.cpp's drafter on the file and compare its drafts with homespec's before keeping it.")] = True,
    force: Annotated[bool, typer.Option("--force", help="Replace --out even if homespec did not write it.")] = False,
) -> None:
    """Write a draft head for another engine: llama.cpp's eagle3 GGUF or vLLM's speculators layout."""
    lazy.check_export_args(fmt, out, dtype)  # usage errors before torch loads
    result = lazy.export_head(head, fmt, out, target=target, twin=eagle3_twin, force=force, dtype=dtype, check=check,
                              verifier=verifier, say=lambda m: print(m, file=sys.stderr))
    print(json.dumps(result.to_dict(), indent=2))
