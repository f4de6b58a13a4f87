"""`homespec bench`: methods side by side on a prompt set."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Optional

import typer

from homespec.cli.app import _stdout, app
from homespec.cli.options import (
    AdaptOpt, BackendOpt, CtxOpt, DepthOpt, DraftOpt, GuardOpt, ModelOpt, NodesOpt, ThreadsOpt, TopkOpt, WindowOpt,
    _run_options,
)
from homespec.errors import UsageError
from homespec.plan.settings import DEFAULT_CTX


class _BenchCommand(typer.core.TyperCommand):
    """bench's parser, which still reads `--json FILE` (the spelling from before `--json` became
    the switch it is on every command) as `--json-out FILE`."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        return super().parse_args(ctx, _legacy_json_file(args))


def _legacy_json_file(args: list[str]) -> list[str]:
    """`--json FILE` / `--json=FILE` become `--json-out FILE`, with a note; `--json -` is the switch;
    `--json` followed by an option, or last, stays the switch. (bench takes no positional
    arguments, so a word after `--json` can only be the file it used to take.)"""
    out, rest = [], list(args)
    while rest:
        a = rest.pop(0)
        if a == "--":
            out += [a, *rest]
            break
        if a == "--json" and rest and rest[0] == "-":  # `--json -`: stdout, the switch
            rest.pop(0)
        elif a == "--json=-":
            a = "--json"
        elif a.startswith("--json=") or (a == "--json" and rest and not rest[0].startswith("-")):
            a = "--json-out" + a[len("--json"):]
            print("note: `bench --json FILE` is now `--json-out FILE`; `--json` alone prints the JSON on stdout",
                  file=sys.stderr)
        out.append(a)
    return out


def _check_output_file(flag: str, path: Optional[str], example: str) -> None:
    """A results file that cannot be written is refused before the bench runs, not after."""
    if path is None:
        return
    import os
    from pathlib import Path

    from homespec.atomic import nearest_existing

    p = Path(path)
    if p.is_dir() or path.endswith((os.sep, "/")):  # "x/" names a directory even before it exists
        raise UsageError(f"{flag} {path} is a directory", hint=f"name a file, e.g. {flag} {p / example}")
    parent = nearest_existing(p)
    if not parent.is_dir():
        raise UsageError(f"{flag} {path}: {parent} is a file, not a directory",
                         hint=f"name a file in a directory, e.g. {flag} {example}")


@app.command(cls=_BenchCommand)
def bench(
    methods: Annotated[str, typer.Option("--methods", help="Comma list of: none, ngram, draft, eagle3.")] = "none,ngram,eagle3",
    model: ModelOpt = None,
    draft: DraftOpt = None,
    backend: BackendOpt = "llamacpp",
    prompts: Annotated[Optional[str], typer.Option("--prompts", help="JSONL ('prompt' or 'turns'); default: homespec's held-out test prompts.")] = None,
    limit: Annotated[int, typer.Option("--limit", help="Prompts to run.")] = 20,
    max_tokens: Annotated[int, typer.Option("--max-tokens", "-n", help="Tokens per prompt.")] = 128,
    temperature: Annotated[float, typer.Option("--temperature", "-t")] = 0.0,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    ctx: CtxOpt = DEFAULT_CTX,
    draft_depth: DepthOpt = None,
    draft_topk: TopkOpt = None,
    draft_tokens: NodesOpt = None,
    threads: ThreadsOpt = None,
    guard: GuardOpt = True,
    adapt: AdaptOpt = False,
    long: Annotated[bool, typer.Option("--long", help="Long-context prompts (512, 1K, 2K, 4K, 8K tokens... up to --ctx); results by context position and prompt length.")] = False,
    window: WindowOpt = None,
    repeat: Annotated[int, typer.Option("--repeat", help="Rounds per prompt (methods' order alternating); per-prompt figures are the median round.")] = 1,
    lockstep: Annotated[bool, typer.Option("--lockstep", help="Run the methods on each prompt together, one step of each in turn: per-prompt ratios immune to machine speed drift.")] = False,
    json_stdout: Annotated[bool, typer.Option("--json", help="Print the results as JSON on stdout, instead of the table (as on every command; `--json FILE` still writes FILE, as --json-out does).")] = False,
    json_file: Annotated[Optional[str], typer.Option("--json-out", help="Write the results as JSON to FILE (`-`: stdout, as --json).")] = None,
    markdown_file: Annotated[Optional[str], typer.Option("--markdown", help="Write a Markdown table to FILE.")] = None,
    plot_file: Annotated[Optional[str], typer.Option("--plot", help="Write a PNG plot to FILE.")] = None,
) -> None:
    """Run methods side by side on a prompt set: tokens/s, speedup, acceptance, latency, exactness."""
    from rich.progress import Progress

    from homespec.atomic import write_bytes
    from homespec.bench.report import markdown, plot, render
    from homespec.bench.run import run_bench, summary
    from homespec.session.prompts import prompt_tokens
    from homespec.prompts import load_prompts, read_prompts_file

    names = [m.strip() for m in methods.split(",") if m.strip()]
    if "none" in names:  # the baseline first, so speedups have their reference
        names = ["none"] + [m for m in names if m != "none"]
    if limit < 1 or max_tokens < 1:
        raise UsageError("--limit and --max-tokens must be positive", hint="e.g. --limit 20 --max-tokens 128")
    if json_file == "-":
        json_stdout, json_file = True, None
    for flag, path, example in (("--json-out", json_file, "bench.json"), ("--markdown", markdown_file, "bench.md"),
                                ("--plot", plot_file, "bench.png")):
        _check_output_file(flag, path, example)
    if long:
        items = None
    else:
        items = read_prompts_file(prompts) if prompts else load_prompts("test")
        items = items[:limit]
    opts = _run_options(model, draft, names[0], backend, ctx, draft_depth, draft_topk, draft_tokens, threads=threads,
                        window=window, guard=guard, adapt=adapt)
    with Progress(console=__import__("rich.console", fromlist=["Console"]).Console(stderr=True), transient=True) as bar:
        task = bar.add_task("bench", total=(len(items) if items else limit) * len(names) * repeat)

        def tick(method: str, done: int, total: int) -> None:
            bar.update(task, completed=done, description=f"bench: {method}")

        def token_prompts(session):
            if items is None:
                return _long_token_prompts(session, ctx, max_tokens, limit)
            return [prompt_tokens(session, list(i.turns[:1]), True) for i in items]

        result = run_bench(opts, names, token_prompts,
                           max_tokens=max_tokens, temperature=temperature, seed=seed, progress=tick,
                           by_context=long,
                           bin_size=1024 if long else 64, repeat=repeat, lockstep=lockstep)
    if json_stdout:
        print(json.dumps(summary(result), indent=2))
    else:
        render(result, _stdout())
    if json_file:
        write_bytes(json_file, (json.dumps(summary(result), indent=2) + "\n").encode())
    if markdown_file:
        write_bytes(markdown_file, markdown(result).encode())
    if plot_file:
        plot(result, plot_file)


LONG_SIZES = (512, 1024, 2048, 4096, 8192, 16384, 32768)  # 512: the short reference


def _long_token_prompts(session, ctx: int, max_tokens: int, limit: int) -> list[list[int]]:
    """Documents, code files and multi-turn histories of each size that fits the context, sized
    with the model's own tokenizer (a words-to-tokens guess is off by tens of percent)."""
    from homespec.longprompts import long_prompts
    from homespec.session.prompts import prompt_tokens

    budget = ctx - max_tokens - 16
    sizes = [n for n in LONG_SIZES if n <= budget]
    if not sizes:
        raise UsageError(f"--ctx {ctx} is too small for --long", hint="use --ctx 4096 or more")
    per = max(1, limit // len(sizes))
    out: list[list[int]] = []
    for n in sizes:
        request = n
        for _ in range(4):  # rescale the request until the longest prompt lands at 0.85-1.1 n tokens
            batch = [prompt_tokens(session, list(i.turns), True) for i in long_prompts(request, per, seed=n)]
            longest = max(len(b) for b in batch)
            if 0.85 * n <= longest <= min(budget, int(n * 1.1)):
                break
            request = max(64, int(request * n / longest * 0.97))
        out += [b for b in batch if len(b) <= budget]
    return out
