"""`homespec models`: the models already on this machine (Ollama, LM Studio, the Hugging Face cache)."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Annotated, Optional

import typer

from homespec.cli import lazy
from homespec.cli.app import _stdout, app
from homespec import limits
from homespec.cli.options import JsonOpt, number


@app.command()
def models(
    gpu: Annotated[Optional[str], typer.Option("--gpu", help="Also plan each model for this machine: auto (probe), none, or catalogue names (4090, 4090,3090).")] = None,
    ctx: Annotated[Optional[int], number(limits.CTX, help="Context length the plans assume (with --gpu). Default: the plan's.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """List the GGUF models Ollama, LM Studio and the Hugging Face cache hold, with the name to pass to
    --model, and the EAGLE heads here, with the name to pass to --draft and the model each drafts for."""
    found, heads = lazy.list_models(gpu, ctx), lazy.list_heads()
    if json_out:
        print(json.dumps([asdict(m) for m in [*found, *heads]], indent=2))
        return
    console = _stdout()
    if not found:
        where = [*map(str, lazy.ollama_roots()), *map(str, lazy.lmstudio_roots()), str(lazy.cache_dir())]
        console.print("no models found in " + ", ".join(where))
    else:
        _models_table(console, found, gpu is not None)
    if heads:
        _heads_table(console, heads)


def _heads_table(console, heads) -> None:
    from rich.table import Table

    table = Table(show_edge=False, pad_edge=False, title="draft heads", title_justify="left")
    for col in ("source", "--draft", "layout", "size", "pairs with"):
        table.add_column(col, justify="right" if col == "size" else "left")
    for h in heads:
        table.add_row(h.source, h.name, h.quant or "?", f"{h.size_bytes / 2**20:.1f} MiB", h.pairs_with or "?")
    console.print(table)


def _models_table(console, found, with_plan: bool) -> None:
    from rich.table import Table

    table = Table(show_edge=False, pad_edge=False)
    for col in ("source", "--model", "quant", "size", "arch", *(("plan",) if with_plan else ())):
        table.add_column(col, justify="right" if col == "size" else "left")
    for m in found:
        plan = lazy.VERDICT_WORDS.get(m.verdict or "", m.error or "-") if with_plan else None
        row = [m.source, m.name, m.quant or "?", f"{m.size_bytes / 2**30:.2f} GiB", m.arch or (m.error or "?")]
        table.add_row(*row, *((plan,) if plan is not None else ()))
    console.print(table)
