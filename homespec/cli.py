"""The `homespec` command. Each command parses, calls one library function, and renders.

Results go to stdout (rich tables or --json); progress and diagnostics to stderr.
Exit codes: 0 ok, 1 runtime error, 2 usage error, 3 plan does not fit. HOMESPEC_DEBUG=1 shows tracebacks.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Annotated, Optional

import typer

from homespec.errors import EXIT_NO_FIT, EXIT_RUNTIME, EXIT_USAGE, HomespecError, UsageError
from homespec.plan.settings import CPU_DRAFT, DEFAULT_CTX, GPU_DRAFT

app = typer.Typer(
    name="homespec",
    help="Will this model, with an EAGLE-3 draft head, fit on my machine, and how fast will it run?",
    context_settings={"help_option_names": ["-h", "--help"]},  # every command inherits -h
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]
GuardOpt = Annotated[bool, typer.Option("--guard/--no-guard", help="Fall back to plain decoding while speculation loses.")]
AdaptOpt = Annotated[bool, typer.Option("--adapt/--no-adapt", help="Size the draft depth from measured cost and acceptance.")]
# The run's and the plan's shared options: one default each (homespec.plan.settings).
CtxOpt = Annotated[int, typer.Option("--ctx", help="Context length in tokens.")]
DepthOpt = Annotated[Optional[int], typer.Option(
    "--draft-depth", help=f"Longest draft path. Default: {CPU_DRAFT[0]} on a CPU, {GPU_DRAFT[0]} on a GPU.")]
TopkOpt = Annotated[Optional[int], typer.Option(
    "--draft-topk", help=f"Children per expanded tree node (1 = a chain). Default: {CPU_DRAFT[1]} on a CPU, "
    f"{GPU_DRAFT[1]} on a GPU.")]
NodesOpt = Annotated[Optional[int], typer.Option(
    "--draft-tokens", help=f"Draft tree nodes, the root included. Default: {CPU_DRAFT[2]} on a CPU, "
    f"{GPU_DRAFT[2]} on a GPU.")]
WindowOpt = Annotated[Optional[int], typer.Option(
    "--window", help="EAGLE head attends to the newest N entries (plus the first 4); default: the length the head "
    "was trained on when its config records it; 0: all.")]

draft_app = typer.Typer(help="Draft heads: train an EAGLE-3.1 head for a target.", no_args_is_help=True)
app.add_typer(draft_app, name="draft")


def _stdout():
    from rich.console import Console

    return Console(soft_wrap=False, width=max(100, Console().width))


@app.command()
def probe(json_out: JsonOpt = False) -> None:
    """Find this machine's GPUs (NVIDIA via NVML, Apple Silicon via sysctl), RAM and CPU."""
    from homespec.hardware.probe import probe as run_probe, probe_json

    m = run_probe()
    if json_out:
        print(json.dumps(probe_json(m), indent=2))
        return
    from homespec.hardware.render import render_machine

    render_machine(m, _stdout())


@app.command()
def plan(
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="Catalogue name (llama-3.1-70b-q4), GGUF path or URL, config.json, or EXL2 dir. Default: the embedded SmolLM2-135M.")] = None,
    gpu: Annotated[str, typer.Option("--gpu", help="auto (probe), none, or catalogue names: 4090 / 4090,3090 / m3-ultra-512.")] = "auto",
    draft: Annotated[Optional[str], typer.Option("--draft", help="Draft head or model: catalogue name, checkpoint dir, GGUF, or 'none'. Default: the model's default pairing.")] = None,
    quant: Annotated[Optional[str], typer.Option("--quant", help="Quantisation for a config.json model (Q4_K_M, Q8_0, exl2-4.65, ...).")] = None,
    ctx: CtxOpt = DEFAULT_CTX,
    kv_type: Annotated[str, typer.Option("--kv-type", help="KV cache type: f16, q8_0, q4_0 (exl2: f16, q8, q6, q4).")] = "f16",
    flash_attn: Annotated[bool, typer.Option("--flash-attn/--no-flash-attn", help="Flash attention (needed for a quantised V cache).")] = True,
    ubatch: Annotated[int, typer.Option("--ubatch", help="Physical batch size (llama.cpp -ub).")] = 512,
    backend: Annotated[Optional[str], typer.Option("--backend", help="llamacpp, exl2 or torch. Default: from the model's format.")] = None,
    draft_tokens: NodesOpt = None,
    draft_depth: DepthOpt = None,
    draft_topk: TopkOpt = None,
    ram: Annotated[Optional[float], typer.Option("--ram", help="Host RAM in GiB (default: this machine's).")] = None,
    emit: Annotated[Optional[str], typer.Option("--emit", help="Print the llama-server or vllm command line for this plan (with --json: as the 'emit' field).")] = None,
    calibrate: Annotated[Optional[str], typer.Option("--calibrate", help="A `homespec bench --json` result from this machine: corrects speed, memory and acceptance.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Budget memory for the target, the draft head and both KV caches; say whether it fits and how fast it runs."""
    from homespec.plan.api import make_plan
    from homespec.plan.render import render, to_json

    p = make_plan(model=model, gpu=gpu, draft=draft, quant=quant, ctx=ctx, kv_type=kv_type, flash_attn=flash_attn,
                  ubatch=ubatch, backend=backend, draft_tokens=draft_tokens, draft_depth=draft_depth,
                  draft_topk=draft_topk, ram=ram, calibrate=calibrate)
    emitted = None
    if emit:
        from homespec.plan.emit import emit as emit_command

        emitted = emit_command(p, emit, model, draft)
        for note in emitted.notes:  # what the command still needs before it runs as printed
            print(f"warning: {note}", file=sys.stderr)
    if json_out:
        print(json.dumps(to_json(p) | ({"emit": emitted.as_json()} if emitted else {}), indent=2))
    elif emitted:
        print(emitted.text())
    else:
        render(p, _stdout())
    if not p.fits:
        raise typer.Exit(EXIT_NO_FIT)


# --- running models ----------------------------------------------------------------------------

ModelOpt = Annotated[Optional[str], typer.Option("--model", "-m", help="GGUF file or Hugging Face directory. Default: the embedded SmolLM2-135M-Instruct.")]
DraftOpt = Annotated[Optional[str], typer.Option("--draft", help="eagle3: head directory (EAGLE-3 layout); draft: a small GGUF/HF model. Default: the shipped head.")]
MethodOpt = Annotated[str, typer.Option("--method", help="none, ngram, draft or eagle3.")]
BackendOpt = Annotated[str, typer.Option("--backend", help="llamacpp, torch or exl2.")]


def _run_options(model, draft, method, backend, ctx, depth, topk, nodes, device=None, threads=None, exact=False,
                 window=None, guard=False, adapt=False):
    from homespec.session.options import RunOptions, draft_shape

    depth, topk, nodes = draft_shape(backend, device, depth, topk, nodes)
    return RunOptions(model=model, draft=draft, method=method, backend=backend, device=device, ctx=ctx,
                      draft_depth=depth, draft_topk=topk, draft_tokens=nodes, threads=threads, exact=exact,
                      window=window, guard=guard, adapt=adapt)


@app.command()
def generate(
    model: ModelOpt = None,
    draft: DraftOpt = None,
    method: MethodOpt = "eagle3",
    backend: BackendOpt = "llamacpp",
    prompt: Annotated[Optional[str], typer.Option("--prompt", "-p", help="The prompt text.")] = None,
    prompts: Annotated[Optional[str], typer.Option("--prompts", help="JSONL file: one object per line with 'prompt' or 'turns'.")] = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", "-n", help="Most tokens to generate per prompt.")] = 256,
    temperature: Annotated[float, typer.Option("--temperature", "-t", help="0 = greedy.")] = 0.0,
    top_k: Annotated[int, typer.Option("--top-k", help="Sample from the k most likely tokens (0 = all).")] = 0,
    top_p: Annotated[float, typer.Option("--top-p", help="Nucleus sampling mass.")] = 1.0,
    seed: Annotated[int, typer.Option("--seed", help="Random seed for sampling.")] = 0,
    chat: Annotated[bool, typer.Option("--chat/--no-chat", help="Wrap the prompt in the model's chat template.")] = True,
    system: Annotated[Optional[str], typer.Option("--system", help="System prompt (chat only).")] = None,
    stop: Annotated[Optional[list[str]], typer.Option("--stop", help="Stop string (repeatable).")] = None,
    ctx: CtxOpt = DEFAULT_CTX,
    draft_depth: DepthOpt = None,
    draft_topk: TopkOpt = None,
    draft_tokens: NodesOpt = None,
    device: Annotated[Optional[str], typer.Option("--device", help="torch backend: cpu, cuda or mps (auto).")] = None,
    threads: Annotated[Optional[int], typer.Option("--threads", help="CPU threads.")] = None,
    exact: Annotated[bool, typer.Option("--exact", help="llama.cpp: verify with the one-token kernels (bit-exact, slower).")] = False,
    guard: GuardOpt = True,
    adapt: AdaptOpt = False,
    window: WindowOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Generate text with speculative decoding, showing tokens/s and acceptance."""
    from homespec.session import Session, final
    from homespec.session.prompts import checked_prompts
    from homespec.speculative.loop import Limits
    from homespec.speculative.sampling import Sampler

    if (prompt is None) == (prompts is None):
        raise UsageError("give exactly one of --prompt and --prompts", hint='e.g. --prompt "Why is the sky blue?"')
    if max_tokens < 1:
        raise UsageError(f"--max-tokens {max_tokens} is not positive", hint="use --max-tokens 256")
    if prompts is not None:
        from homespec.prompts import read_prompts_file

        items = [list(i.turns[:1]) for i in read_prompts_file(prompts)]
    else:
        items = [[prompt]]
    opts = _run_options(model, draft, method, backend, ctx, draft_depth, draft_topk, draft_tokens, device, threads,
                        exact, window=window, guard=guard, adapt=adapt)
    token_items = checked_prompts(opts, items, chat, system, max_tokens, source=prompts)  # before any weights load
    sampler = Sampler(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
    session = Session.open(opts)
    try:
        for ids in token_items:
            stream = session.stream(ids, sampler=sampler, limits=Limits(max_tokens=max_tokens), stop=tuple(stop or ()),
                                    seed=seed)
            if json_out:
                print(json.dumps(_result_json(session, final(stream))), flush=True)
            else:
                _print_answer(session, stream)
    finally:
        session.close()


def _print_answer(session, stream) -> None:
    """generate without --json: the text as it comes on stdout, its figures on stderr."""
    from homespec.session import Finish, TextDelta

    for r in stream:
        if isinstance(r, TextDelta) and r.text:
            sys.stdout.write(r.text)
            sys.stdout.flush()
        elif isinstance(r, Finish):
            res = r
    print()
    guard, o = session.guard, session.options
    print(f"[{len(res.token_ids)} tokens, {res.tokens_per_s:.1f} tok/s, "
          f"{res.mean_accepted:.2f} tokens per target pass, {res.target_passes} target passes, "
          f"{o.method} on {o.backend}" + (f"; {guard.summary()}" if guard else "") + "]", file=sys.stderr)


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
    from pathlib import Path

    p = Path(path)
    if p.is_dir():
        raise UsageError(f"{flag} {path} is a directory", hint=f"name a file, e.g. {flag} {p / example}")
    parent = p.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
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
    threads: Annotated[Optional[int], typer.Option("--threads", help="CPU threads.")] = None,
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
    method: MethodOpt = "eagle3",
    backend: BackendOpt = "llamacpp",
    temperature: Annotated[float, typer.Option("--temperature", "-t", help="0 = greedy.")] = 0.0,
    top_k: Annotated[int, typer.Option("--top-k")] = 0,
    top_p: Annotated[float, typer.Option("--top-p")] = 1.0,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    ctx: CtxOpt = DEFAULT_CTX,
    system: Annotated[Optional[str], typer.Option("--system", help="System prompt.")] = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", "-n", help="Most tokens per answer.")] = 512,
    draft_depth: DepthOpt = None,
    draft_topk: TopkOpt = None,
    draft_tokens: NodesOpt = None,
    threads: Annotated[Optional[int], typer.Option("--threads", help="CPU threads.")] = None,
    guard: GuardOpt = True,
    adapt: AdaptOpt = False,
    window: WindowOpt = None,
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

    from homespec.chat import Chat, repl
    from homespec.chat_store import ChatFile, find, load
    from homespec.plan.render import render as render_plan
    from homespec.session import Session
    from homespec.session.options import DEFAULT_HEAD, check_options
    from homespec.speculative.sampling import Sampler
    from homespec.termline import stage

    saved = load(find(None if resume == "latest" else resume)) if resume is not None else None  # before loading
    if saved is not None and model is None and saved.model and os.path.exists(saved.model):
        model = saved.model  # continue with the model it was saved with
    if method == "eagle3" and draft is None and model is None and not (DEFAULT_HEAD / "config.json").is_file():
        method = "ngram"  # no shipped head in this install: still speculate, with prompt lookup
        print("note: no shipped EAGLE head found; using --method ngram", file=sys.stderr)
    opts = _run_options(model, draft, method, backend, ctx, draft_depth, draft_topk, draft_tokens,
                        threads=threads, window=window, guard=guard, adapt=adapt)
    check_options(opts)  # bad arguments are refused before the loading line
    with stage(sys.stderr, f"loading {os.path.basename(model) if model else 'the embedded SmolLM2-135M'} "
                           f"({method} on {backend})"):
        session = Session.open(opts)
    try:
        if session.plan is not None:
            render_plan(session.plan, Console(stderr=True))
        c = Chat(session, sampler=Sampler(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed),
                 max_tokens=max_tokens, system=system, seed=seed, file=ChatFile.new())
        c.prepare()
        if saved is not None:
            c.resume(saved)
        code = repl(c)
    finally:
        session.close()
    if code:
        raise typer.Exit(code)


from homespec.train.config import TrainConfig  # noqa: E402 - light (no torch): the defaults of `draft train`

_TRAIN = TrainConfig()  # the option defaults below: one source for the CLI and the library


@draft_app.command("train")
def draft_train(
    target: Annotated[Optional[str], typer.Option("--target", help="Target model: GGUF file or HF directory. Default: the embedded SmolLM2.")] = _TRAIN.target,
    out: Annotated[str, typer.Option("--out", help="Output directory (head + data + checkpoints): a new or empty directory, or an earlier run's to resume it.")] = _TRAIN.out,
    prompts: Annotated[Optional[str], typer.Option("--prompts", help="JSONL prompts ('prompt' or 'turns'); default: homespec's train split.")] = _TRAIN.prompts,
    tokens: Annotated[int, typer.Option("--tokens", help="Reply tokens of self-distilled data.")] = _TRAIN.tokens,
    epochs: Annotated[int, typer.Option("--epochs")] = _TRAIN.epochs,
    device: Annotated[str, typer.Option("--device", help="cpu, cuda or mps.")] = _TRAIN.device,
    draft_vocab: Annotated[int, typer.Option("--draft-vocab", help="Draft vocabulary size.")] = _TRAIN.draft_vocab,
    ttt_steps: Annotated[int, typer.Option("--ttt-steps", help="Training-time-test unroll steps.")] = _TRAIN.ttt_steps,
    seed: Annotated[int, typer.Option("--seed")] = _TRAIN.seed,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", help="Longest self-distilled reply.")] = _TRAIN.max_new_tokens,
    backend: Annotated[Optional[str], typer.Option("--backend", help="llamacpp (GGUF) or torch. Default: from the target.")] = _TRAIN.backend,
    eagle3: Annotated[bool, typer.Option("--eagle3", help="Plain EAGLE-3: fc_norm and norm_output off.")] = _TRAIN.eagle3,
    freeze_lm_head: Annotated[bool, typer.Option("--freeze-lm-head", help="Keep the draft read-out at the target's output rows.")] = _TRAIN.freeze_lm_head,
    hidden_weight: Annotated[float, typer.Option("--hidden-weight", help="Weight of the regression onto the target's hidden state (0: off).")] = _TRAIN.hidden_weight,
    init: Annotated[Optional[str], typer.Option("--init", help="Start from this head's weights (a directory in the EAGLE-3 layout) instead of a fresh head.")] = _TRAIN.init,
    skip_shards: Annotated[int, typer.Option("--skip-shards", help="Begin data at this shard of the prompt order (64 prompts each), e.g. past the ones an --init head was trained on.")] = _TRAIN.skip_shards,
    keep_vocab: Annotated[bool, typer.Option("--keep-vocab", help="Keep the --init head's draft vocabulary instead of counting one on this run's data.")] = _TRAIN.keep_vocab,
    data_from: Annotated[Optional[list[str]], typer.Option("--data-from", help="Also train on the data in this directory (another run's OUT/data, same target); repeatable.")] = None,
) -> None:
    """Train an EAGLE-3.1 draft head for a target by self-distillation (resumable)."""
    from homespec.train import train_head
    from homespec.train.progress import RichProgress

    # the config checks its settings as it is made; train_head checks --target, --out, --init and
    # --data-from on disk, all before any data is generated or any model loaded
    config = TrainConfig(target=target, out=out, prompts=prompts, tokens=tokens, epochs=epochs, device=device,
                         draft_vocab=draft_vocab, ttt_steps=ttt_steps, seed=seed, max_new_tokens=max_new_tokens,
                         backend=backend, eagle3=eagle3, freeze_lm_head=freeze_lm_head, hidden_weight=hidden_weight,
                         init=init, skip_shards=skip_shards, keep_vocab=keep_vocab, data_from=tuple(data_from or ()))
    with RichProgress() as progress:
        result = train_head(config, progress=progress)
    print(json.dumps({"head_dir": str(result.head_dir), "steps": result.steps, "final_loss": result.final_loss,
                      "tau": result.tau, "head_bytes": result.head_bytes, "draft_vocab": result.draft_vocab,
                      "init": None if result.warm is None else {"from": str(result.warm.source),
                                                                "rows_kept": result.warm.rows_kept,
                                                                "rows_new": result.warm.rows_new}}, indent=2))


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


def _result_json(session, res) -> dict:
    """generate --json: one answer's row (its keys are an interface: tests/test_cli_generate.py)."""
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
        "method": o.method,
        "backend": o.backend,
        "model": session.model_path,
        "memory": session.memory(),
    }
    if session.guard is not None:
        row["guard"] = session.guard.as_json()
    return row


def _click_exceptions():
    """The parser's exception classes (typer 0.29 carries its own copy of click)."""
    try:
        from typer._click import exceptions
    except ImportError:  # older typer: click itself
        from click import exceptions
    return exceptions


def _command_path(e, argv: list[str] | None) -> str:
    """The command a parser error is about. An option missing its value at the end of the line is
    raised in the root's context, so the subcommand names on the line are followed instead."""
    if e.ctx is not None and not hasattr(e.ctx.command, "commands"):
        return e.ctx.command_path
    words, command = [app.info.name], typer.main.get_command(app)
    for arg in sys.argv[1:] if argv is None else argv:
        sub = getattr(command, "commands", {}).get(arg)
        if sub is None:
            break
        words.append(arg)
        command = sub
    return " ".join(words)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def main(argv: list[str] | None = None) -> int:
    """Entry point: turn known errors into two lines on stderr and an exit code."""
    click = _click_exceptions()
    try:
        code = app(args=argv, prog_name=app.info.name, standalone_mode=False)
        return code if isinstance(code, int) else 0
    except SystemExit as e:  # a command that exits with its own code
        return int(e.code or 0) if not isinstance(e.code, str) else 1
    except click.NoArgsIsHelpError as e:  # `homespec` or `homespec draft` alone: the help
        if e.format_message().strip():  # rich help has printed itself already
            print(e.format_message(), file=sys.stderr)
        return EXIT_USAGE
    except click.UsageError as e:  # a bad flag or value, caught by the parser
        print(f"error: {_one_line(e.format_message())}", file=sys.stderr)
        print(f"hint: see `{_command_path(e, argv)} --help`", file=sys.stderr)
        return EXIT_USAGE
    except typer.Abort:  # Ctrl-C or end of input inside a prompt
        print("error: interrupted", file=sys.stderr)
        return 130
    except click.ClickException as e:
        print(f"error: {_one_line(e.format_message())}", file=sys.stderr)
        return e.exit_code
    except HomespecError as e:
        if os.environ.get("HOMESPEC_DEBUG"):
            raise
        print(f"error: {e.message}", file=sys.stderr)
        if e.hint:
            print(f"hint: {e.hint}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - the last line of defence against tracebacks
        if os.environ.get("HOMESPEC_DEBUG"):
            raise
        print(f"error: internal error: {type(e).__name__}: {e}", file=sys.stderr)
        print("hint: rerun with HOMESPEC_DEBUG=1 for a traceback, and report it", file=sys.stderr)
        return EXIT_RUNTIME


def _entry() -> None:  # pragma: no cover
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
