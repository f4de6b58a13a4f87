"""`homespec pull`: a head or a model into the Hugging Face cache, resumable, with a progress bar."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Annotated

import typer

from homespec.cli import lazy
from homespec.cli.app import app
from homespec.cli.options import JsonOpt


@app.command()
def pull(
    name: Annotated[str, typer.Argument(help="A catalogue head (eagle3-llama3.1-8b), its repo, org/repo[:QUANT] or org/repo/FILE.gguf.")],
    draft: Annotated[bool, typer.Option("--draft/--no-draft", help="With a GGUF repo: also fetch the eagle3-*.gguf sidecar beside the model, as llama.cpp's -hf does.")] = True,
    json_out: JsonOpt = False,
) -> None:
    """Fetch a draft head or a model into the Hugging Face cache (resumable; nothing is fetched twice)."""
    pulled = lazy.pull(name, with_draft=draft)
    if json_out:
        print(json.dumps([asdict(p) | {"path": str(p.path)} for p in pulled], indent=2))
        return
    for p in pulled:  # plain lines: a path is never wrapped
        flag = "--draft" if p.kind in ("head", "sidecar") else "--model"
        files = f"{len(p.files)} file{'s' if len(p.files) != 1 else ''}" if p.files else "a snapshot"
        size = f", {p.size / 2**20:,.1f} MiB" if p.size else ""
        print(f"{p.kind}: {p.repo} ({files}{size}) in {p.path}")
        print(f"  use it with {flag} {p.name}" + (" (or --draft auto beside its model)" if flag == "--draft" else ""))
