"""`homespec generate`: text with speculative decoding, and its figures."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Optional

import typer

from homespec.cli import lazy
from homespec.cli.app import app
from homespec.cli.options import (
    AdaptOpt, BackendOpt, CtxOpt, DepthOpt, DeviceOpt, DraftOpt, ExactOpt, GuardOpt, JsonOpt, MethodOpt, ModelOpt,
    NodesOpt, SeedOpt, TemperatureOpt, ThreadsOpt, TopKOpt, TopkOpt, TopPOpt, WindowOpt, DraftDtypeOpt, RunArgs, max_tokens_opt,
)
from homespec.errors import UsageError
from homespec.plan.settings import DEFAULT_CTX


@app.command()
def generate(
    model: ModelOpt = None,
    draft: DraftOpt = None,
    method: MethodOpt = "auto",
    backend: BackendOpt = "llamacpp",
    prompt: Annotated[Optional[str], typer.Option("--prompt", "-p", help="The prompt text.")] = None,
    prompts: Annotated[Optional[str], typer.Option("--prompts", help="JSONL file: one object per line with 'prompt' or 'turns'.")] = None,
    max_tokens: Annotated[int, max_tokens_opt("Most tokens to generate per prompt.")] = 256,
    temperature: TemperatureOpt = 0.0,
    top_k: TopKOpt = 0,
    top_p: TopPOpt = 1.0,
    seed: SeedOpt = 0,
    chat: Annotated[bool, typer.Option("--chat/--no-chat", help="Wrap the prompt in the model's chat template.")] = True,
    system: Annotated[Optional[str], typer.Option("--system", help="System prompt (chat only).")] = None,
    stop: Annotated[Optional[list[str]], typer.Option("--stop", help="Stop string (repeatable).")] = None,
    ctx: CtxOpt = DEFAULT_CTX,
    draft_depth: DepthOpt = None,
    draft_topk: TopkOpt = None,
    draft_tokens: NodesOpt = None,
    device: DeviceOpt = None,
    threads: ThreadsOpt = None,
    exact: ExactOpt = False,
    guard: GuardOpt = True,
    adapt: AdaptOpt = False,
    window: WindowOpt = None,
    draft_dtype: DraftDtypeOpt = "q8_0",
    json_out: JsonOpt = False,
) -> None:
    """Generate text with speculative decoding, showing tokens/s and acceptance."""
    if (prompt is None) == (prompts is None):
        raise UsageError("give exactly one of --prompt and --prompts", hint='e.g. --prompt "Why is the sky blue?"')
    if prompts is not None:
        items = [list(i.turns[:1]) for i in lazy.read_prompts_file(prompts)]
    else:
        items = [[prompt]]
    opts = RunArgs(model=model, draft=draft, method=method, backend=backend, ctx=ctx, draft_depth=draft_depth,
                   draft_topk=draft_topk, draft_tokens=draft_tokens, device=device, threads=threads, exact=exact,
                   window=window, draft_dtype=draft_dtype, guard=guard, adapt=adapt).options()
    setup = lazy.set_up(opts)  # options checked, model resolved, plan made: once
    token_items = lazy.checked_prompts(setup, items, chat, system, max_tokens, source=prompts)  # before any weights load
    sampler = lazy.Sampler(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
    session = lazy.Session.from_setup(setup)
    try:
        for ids in token_items:
            stream = session.stream(ids, sampler=sampler, limits=lazy.Limits(max_tokens=max_tokens), stop=tuple(stop or ()),
                                    seed=seed)
            if json_out:
                print(json.dumps(_result_json(session, lazy.final(stream))), flush=True)
            else:
                _print_answer(session, stream)
    finally:
        session.close()


def _print_answer(session, stream) -> None:
    """generate without --json: the text as it comes on stdout, its figures on stderr."""
    for r in stream:
        if isinstance(r, lazy.TextDelta) and r.text:
            sys.stdout.write(r.text)
            sys.stdout.flush()
        elif isinstance(r, lazy.Finish):
            res = r
    print()
    guard, o = session.guard, session.options
    print(f"[{len(res.token_ids)} tokens, {res.tokens_per_s:.1f} tok/s, "
          f"{res.mean_accepted:.2f} tokens per target pass, {res.target_passes} target passes, "
          f"{o.method} on {o.backend}" + (f"; {guard.summary()}" if guard else "") + "]", file=sys.stderr)


def _result_json(session, res) -> dict:
    """generate --json: one answer's row (its keys are an interface: tests/cli/test_cli_generate.py)."""
    o = session.options
    row = {
        "text": res.text,
        "token_ids": list(res.token_ids),
        "prompt_token_ids": list(res.prompt_token_ids),
        "tokens_per_s": round(res.tokens_per_s, 3),
        "mean_accepted": round(res.mean_accepted, 4),
        "target_passes": res.target_passes,
        "acceptance_by_depth": [round(x, 4) for x in res.acceptance_by_depth()],
        "prefill_ms": round(res.prefill_s * 1e3, 2),
        "finish": res.finish,
        "cached_tokens": res.cached_tokens,
        "method": o.method,
        "backend": o.backend,
        "model": session.model_path,
        "memory": session.memory(),
    }
    if session.guard is not None:
        row["guard"] = session.guard.as_json()
    return row
