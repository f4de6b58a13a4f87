"""`homespec chat`: an interactive chat with live figures, saved and resumable."""

from __future__ import annotations

import os
import sys
from typing import Annotated, Optional

import typer

from homespec.cli import lazy
from homespec.cli.app import app
from homespec.cli.options import (
    AdaptOpt, BackendOpt, CtxOpt, DepthOpt, DraftOpt, GuardOpt, MethodOpt, ModelOpt, NodesOpt, SeedOpt, TemperatureOpt,
    ThreadsOpt, TopKOpt, TopkOpt, TopPOpt, WindowOpt, DraftDtypeOpt, RunArgs, max_tokens_opt,
)
from homespec.plan.settings import DEFAULT_CTX


class _ResumeCommand(typer.core.TyperCommand):
    """`chat --resume` takes an optional value: alone (or before another option) it means the latest."""

    def parse_args(self, ctx, args):
        args = list(args)
        for i, arg in enumerate(args):
            if arg == "--":
                break
            if arg == "--resume" and (i + 1 == len(args) or args[i + 1].startswith("-")):
                args.insert(i + 1, "latest")
        return super().parse_args(ctx, args)


@app.command(cls=_ResumeCommand)
def chat(
    model: ModelOpt = None,
    draft: DraftOpt = None,
    method: MethodOpt = "auto",
    backend: BackendOpt = "llamacpp",
    temperature: TemperatureOpt = 0.0,
    top_k: TopKOpt = 0,
    top_p: TopPOpt = 1.0,
    seed: SeedOpt = 0,
    ctx: CtxOpt = DEFAULT_CTX,
    system: Annotated[Optional[str], typer.Option("--system", help="System prompt.")] = None,
    max_tokens: Annotated[int, max_tokens_opt("Most tokens per answer.")] = 512,
    draft_depth: DepthOpt = None,
    draft_topk: TopkOpt = None,
    draft_tokens: NodesOpt = None,
    threads: ThreadsOpt = None,
    guard: GuardOpt = True,
    adapt: AdaptOpt = False,
    window: WindowOpt = None,
    draft_dtype: DraftDtypeOpt = "q8_0",
    cache_prompt: Annotated[bool, typer.Option("--cache-prompt/--no-cache-prompt", help="Keep the conversation's KV between turns, so a turn prefills only what it adds (default on).")] = True,
    resume: Annotated[Optional[str], typer.Option("--resume", metavar="[ID|FILE]", help="Continue a saved chat: alone, the latest; or its id (the file name in the chats folder) or a file.")] = None,
) -> None:
    """Chat with live tokens/s and acceptance. With no arguments: the embedded SmolLM2 with its shipped head.

    Commands at the prompt:
      /stats       the conversation's figures, memory and method
      /reset       start a new conversation (the last one stays saved)
      /save FILE   also write the conversation to FILE
      /help        list these commands
      /quit        save and leave (also /exit, Ctrl-D, Ctrl-C at the prompt)
    Ctrl-C during an answer stops it and keeps the chat.

    Each conversation is saved after every answer, in $HOMESPEC_CHATS_DIR if set,
    else $XDG_DATA_HOME/homespec/chats (default ~/.local/share/homespec/chats;
    macOS: ~/Library/Application Support/homespec/chats). Leaving prints the
    file; --resume continues the latest, --resume ID|FILE that one.
    """
    from rich.console import Console

    saved = lazy.load_chat(lazy.find_chat(None if resume == "latest" else resume)) if resume is not None else None  # before loading
    if saved is not None and model is None and saved.model and os.path.exists(saved.model):
        model = saved.model  # continue with the model it was saved with
    opts = RunArgs(model=model, draft=draft, method=method, backend=backend, ctx=ctx, draft_depth=draft_depth,
                   draft_topk=draft_topk, draft_tokens=draft_tokens, threads=threads, window=window, draft_dtype=draft_dtype, guard=guard,
                   adapt=adapt).options()
    opts = lazy.lookup_without_head(opts)  # no shipped head in this install: still speculate, with prompt lookup
    setup = lazy.set_up(opts)  # bad arguments are refused before the loading line; the plan made once
    with lazy.stage(sys.stderr, f"loading {os.path.basename(model) if model else 'the embedded SmolLM2-135M'} "
                                f"({opts.method} on {backend})"):
        session = lazy.Session.from_setup(setup)
    try:
        if session.plan is not None:
            lazy.render_plan(session.plan, Console(stderr=True))
        c = lazy.Chat(session, sampler=lazy.Sampler(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed),
                      max_tokens=max_tokens, system=system, seed=seed, file=lazy.ChatFile.new(),
                      cache_prompt=cache_prompt)
        if saved is not None:
            c.resume(saved)
        code = lazy.repl(c)
    finally:
        session.close()
    if code:
        raise typer.Exit(code)
