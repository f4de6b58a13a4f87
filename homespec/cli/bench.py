"""`homespec bench`: methods side by side on a prompt set."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Optional

import typer

from homespec import limits
from homespec.cli import lazy
from homespec.cli.app import _stdout, app
from homespec.cli.options import (
    AdaptOpt, BackendOpt, CtxOpt, DepthOpt, DraftOpt, GuardOpt, ModelOpt, NodesOpt, SeedOpt, TemperatureOpt, ThreadsOpt,
    TopkOpt, WindowOpt, DraftDtypeOpt, RunArgs, max_tokens_opt, number,
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
    """A results file that cannot be written (a directory, a FIFO, a folder this process may not
    write in) is refused before the bench runs, not after (homespec.userfiles)."""
    if path is not None:
        lazy.writable(path, flag, example)


@app.command(cls=_BenchCommand)
def bench(
    methods: Annotated[str, typer.Option("--methods", help="Comma list of: auto, none, ngram, suffix, draft, eagle3, mtp.")] = "none,auto",
    model: ModelOpt = None,
    draft: DraftOpt = None,
    backend: BackendOpt = "llamacpp",
    prompts: Annotated[Optional[str], typer.Option("--prompts", help="A packaged set (test, dev, edit: code and prose edits, edit-dev) or a JSONL file ('prompt' or 'turns'); default: homespec's held-out test prompts.")] = None,
    category: Annotated[Optional[str], typer.Option("--category", help="Only prompts of these categories (comma list), e.g. chat; results are reported per category.")] = None,
    limit: Annotated[int, number(limits.LIMIT, help="Prompts to run.")] = 20,
    max_tokens: Annotated[int, max_tokens_opt("Tokens per prompt.")] = 128,
    temperature: TemperatureOpt = 0.0,
    seed: SeedOpt = 0,
    ctx: CtxOpt = DEFAULT_CTX,
    draft_depth: DepthOpt = None,
    draft_topk: TopkOpt = None,
    draft_tokens: NodesOpt = None,
    threads: ThreadsOpt = None,
    guard: GuardOpt = True,
    adapt: AdaptOpt = False,
    long: Annotated[bool, typer.Option("--long", help="Long-context prompts (512, 1K, 2K, 4K, 8K tokens... up to --ctx); results by context position and prompt length.")] = False,
    window: WindowOpt = None,
    draft_dtype: DraftDtypeOpt = "q8_0",
    repeat: Annotated[int, number(limits.REPEAT, help="Rounds per prompt (methods' order alternating); per-prompt figures are the median round.")] = 1,
    lockstep: Annotated[bool, typer.Option("--lockstep", help="Run the methods on each prompt together, one step of each in turn: per-prompt ratios immune to machine speed drift.")] = False,
    json_stdout: Annotated[bool, typer.Option("--json", help="Print the results as JSON on stdout, instead of the table (as on every command; `--json FILE` still writes FILE, as --json-out does).")] = False,
    json_file: Annotated[Optional[str], typer.Option("--json-out", help="Write the results as JSON to FILE (`-`: stdout, as --json).")] = None,
    markdown_file: Annotated[Optional[str], typer.Option("--markdown", help="Write a Markdown table to FILE.")] = None,
    plot_file: Annotated[Optional[str], typer.Option("--plot", help="Write a PNG plot to FILE.")] = None,
    against_: Annotated[Optional[str], typer.Option("--against", help="Also run llama.cpp's own `llama-server` on the same prompts (greedy): plain, and with --server-draft its eagle3 drafter.")] = None,
    server: Annotated[Optional[str], typer.Option("--server", help="The llama-server binary. Default: scripts/build_llamacpp_tools.sh's build.")] = None,
    server_draft: Annotated[Optional[str], typer.Option("--server-draft", help="An eagle3 GGUF (homespec draft export) for llama-server's drafter.")] = None,
    server_draft_n: Annotated[int, number(limits.SERVER_DRAFT_N, help="llama-server's --spec-draft-n-max.")] = 4,
) -> None:
    """Run methods side by side on a prompt set: tokens/s, speedup, acceptance, latency, exactness."""
    from rich.progress import Progress

    names = _method_names(methods)
    if json_file == "-":
        json_stdout, json_file = True, None
    for flag, path, example in (("--json-out", json_file, "bench.json"), ("--markdown", markdown_file, "bench.md"),
                                ("--plot", plot_file, "bench.png")):
        _check_output_file(flag, path, example)
    server_bin = _check_against(against_, server, server_draft, temperature, long, repeat, lockstep)
    items = None if long else _prompt_items(prompts, category)[:limit]
    opts = RunArgs(model=model, draft=draft, method=names[0], backend=backend, ctx=ctx, draft_depth=draft_depth,
                   draft_topk=draft_topk, draft_tokens=draft_tokens, threads=threads, window=window, draft_dtype=draft_dtype, guard=guard,
                   adapt=adapt).options()
    with Progress(console=__import__("rich.console", fromlist=["Console"]).Console(stderr=True), transient=True) as bar:
        task = bar.add_task("bench", total=(len(items) if items else limit) * len(names) * repeat)

        def tick(method: str, done: int, total: int) -> None:
            bar.update(task, completed=done, description=f"bench: {method}")

        asked: list[list[int]] = []

        def token_prompts(session):
            if items is None:
                return _long_token_prompts(session, ctx, max_tokens, limit)
            asked[:] = [lazy.prompt_tokens(session, list(i.turns[:1]), True) for i in items]
            return asked

        result = lazy.run_bench(opts, names, token_prompts,
                                max_tokens=max_tokens, temperature=temperature, seed=seed, progress=tick,
                                by_context=long,
                                bin_size=1024 if long else 64, repeat=repeat, lockstep=lockstep,
                                categories=[i.category for i in items] if items else None)
    record, side = lazy.bench_summary(result), ""
    if server_bin is not None:
        rows = _run_against(result, asked, server_bin, server_draft, server_draft_n, max_tokens, ctx, threads)
        record["against_llama_server"], side = lazy.llama_server_json(rows), lazy.llama_server_table(rows)
    _write_results(result, record, side, json_stdout, json_file, markdown_file, plot_file)


PACKAGED = ("test", "dev", "edit", "edit-dev")  # the sets --prompts names (train is too large to bench)


def _prompt_items(prompts: Optional[str], category: Optional[str]) -> list:
    """--prompts (a packaged set's name or a JSONL file) and --category, as prompt items."""
    items = (lazy.load_prompts(prompts or "test") if prompts is None or prompts in PACKAGED
             else lazy.read_prompts_file(prompts))
    if category is None:
        return items
    wanted = {c.strip() for c in category.split(",") if c.strip()}
    chosen = [i for i in items if i.category in wanted]
    if not chosen:
        found = ", ".join(sorted({i.category for i in items}))
        raise UsageError(f"--category {category}: no such prompts in this set", hint=f"its categories: {found}")
    return chosen


def _method_names(methods: str) -> list[str]:
    """--methods as a list, the baseline (none) first so speedups have their reference."""
    names = [m.strip() for m in methods.split(",") if m.strip()]
    if not names:
        raise UsageError(f"--methods {methods!r} names no method", hint="e.g. --methods none,ngram,eagle3")
    return ["none"] + [m for m in names if m != "none"] if "none" in names else names


def _write_results(result, record: dict, side: str, json_stdout: bool, json_file: Optional[str],
                   markdown_file: Optional[str], plot_file: Optional[str]) -> None:
    """The table (or JSON) on stdout, and the files asked for; `side`: the table beside llama-server."""
    if json_stdout:
        print(json.dumps(record, indent=2))
    else:
        lazy.render_bench(result, _stdout())
        if side:
            print("\nbeside llama-server (same prompts, greedy):\n" + side)
    table = lazy.bench_markdown(result) + ("\n" + side if side else "") if markdown_file else ""
    for flag, path, write in (
            ("--json-out", json_file, lambda p: lazy.write_bytes(p, (json.dumps(record, indent=2) + "\n").encode())),
            ("--markdown", markdown_file, lambda p: lazy.write_bytes(p, table.encode())),
            ("--plot", plot_file, lambda p: lazy.bench_plot(result, p))):
        if path:
            try:
                write(path)
            except OSError as e:  # a disk that filled during the run
                raise lazy.write_error(e, path, flag) from None


def _check_against(against: Optional[str], server: Optional[str], server_draft: Optional[str], temperature: float,
                   long: bool, repeat: int, lockstep: bool):
    """--against llama-server's settings, checked before any model loads; -> the server binary or None."""
    if against is None:
        if server or server_draft:
            raise UsageError("--server and --server-draft go with --against llama-server", hint="add --against llama-server")
        return None
    if against != "llama-server":
        raise UsageError(f"--against {against}: only llama-server is supported", hint="use --against llama-server")
    if temperature != 0 or long or repeat != 1 or lockstep:
        raise UsageError("--against llama-server compares greedy answers on the packaged or given prompts",
                         hint="drop --temperature, --long, --repeat and --lockstep")
    if server_draft is not None:
        from pathlib import Path

        if not Path(server_draft).is_file():
            raise UsageError(f"--server-draft {server_draft} is not a file",
                             hint="export one with `homespec draft export HEAD --format gguf --out FILE`")
    return lazy.find_llama_server(server)


def _run_against(result, prompts, server_bin, server_draft, n_max, max_tokens, ctx, threads):
    import os
    import tempfile
    from pathlib import Path

    log_dir = Path(tempfile.mkdtemp(prefix="homespec-llama-server-"))
    print(f"bench: llama-server on the same prompts (logs in {log_dir})", file=sys.stderr)
    return lazy.against_llama_server(result, prompts, server=server_bin, draft_gguf=server_draft, n_max=n_max,
                                     max_tokens=max_tokens, ctx=ctx, threads=threads or os.cpu_count() or 1,
                                     log_dir=log_dir)


LONG_SIZES = (512, 1024, 2048, 4096, 8192, 16384, 32768)  # 512: the short reference


def _long_token_prompts(session, ctx: int, max_tokens: int, limit: int) -> list[list[int]]:
    """Documents, code files and multi-turn histories of each size that fits the context, sized
    with the model's own tokenizer (a words-to-tokens guess is off by tens of percent)."""
    budget = ctx - max_tokens - 16
    sizes = [n for n in LONG_SIZES if n <= budget]
    if not sizes:
        raise UsageError(f"--ctx {ctx} is too small for --long", hint="use --ctx 4096 or more")
    per = max(1, limit // len(sizes))
    out: list[list[int]] = []
    for n in sizes:
        request = n
        for _ in range(4):  # rescale the request until the longest prompt lands at 0.85-1.1 n tokens
            batch = [lazy.prompt_tokens(session, list(i.turns), True) for i in lazy.long_prompts(request, per, seed=n)]
            longest = max(len(b) for b in batch)
            if 0.85 * n <= longest <= min(budget, int(n * 1.1)):
                break
            request = max(64, int(request * n / longest * 0.97))
        out += [b for b in batch if len(b) <= budget]
    return out
