"""The typer apps: `homespec` and its `draft` group, and the console results are rendered on."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="homespec",
    help="Will this model, with an EAGLE-3 draft head, fit on my machine, and how fast will it run?",
    context_settings={"help_option_names": ["-h", "--help"]},  # every command inherits -h
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

draft_app = typer.Typer(help="Draft heads: train an EAGLE-3.1 head for a target, export one for llama.cpp or vLLM.", no_args_is_help=True)
app.add_typer(draft_app, name="draft")


def _stdout():
    from rich.console import Console

    return Console(soft_wrap=False, width=max(100, Console().width))
