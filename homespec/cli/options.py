"""The options several commands share, as `Annotated` aliases, and RunArgs: the run options they build."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from homespec import limits
from homespec.cli import lazy
from homespec.plan.settings import CPU_DRAFT, DEFAULT_CTX, GPU_DRAFT

if TYPE_CHECKING:
    from homespec.engine.options import RunOptions


class OutOfRange(typer.BadParameter):
    """A number outside its option's range: `error: --flag VALUE is outside [lo, hi]` and a hint
    naming a value that works (homespec.cli.errors renders it)."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


def number(r: limits.Range, *names: str, help: str = "", **kw) -> typer.models.OptionInfo:
    """An option parsed through its range (homespec.limits): nan, inf and values outside the range
    are the parser's usage errors, before anything loads."""
    def parse(text):
        try:
            return r.parse(text)
        except ValueError as e:
            raise OutOfRange(str(e), hint=f"use {(names or (r.name,))[0]} {r.example}") from None

    return typer.Option(*(names or (r.name,)), parser=parse, metavar="INTEGER" if r.integer else "FLOAT",
                        help=help, **kw)


JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]
ThreadsOpt = Annotated[Optional[int], number(
    limits.THREADS, help="CPU threads (at most one per CPU; default: every physical core, or $HOMESPEC_THREADS).")]
# sampling, shared by generate, chat and bench (the server takes the same ranges)
TemperatureOpt = Annotated[float, number(limits.TEMPERATURE, "--temperature", "-t", help="0 = greedy; at most 2.")]
TopKOpt = Annotated[int, number(limits.TOP_K, help="Sample from the k most likely tokens (0 = all).")]
TopPOpt = Annotated[float, number(limits.TOP_P, help="Nucleus sampling mass, in (0, 1] (1 = off).")]
SeedOpt = Annotated[int, number(limits.SEED, help="Random seed for sampling (a signed 64-bit integer).")]
DeviceOpt = Annotated[Optional[str], typer.Option("--device", help="torch backend: cpu, cuda or mps (auto).")]
ExactOpt = Annotated[bool, typer.Option("--exact", help="llama.cpp: verify with the one-token kernels (bit-exact, slower).")]
GuardOpt = Annotated[bool, typer.Option("--guard/--no-guard", help="Fall back to plain decoding while speculation loses.")]
AdaptOpt = Annotated[bool, typer.Option("--adapt/--no-adapt", help="Accepted for compatibility: the guard sizes the draft depth every step.")]
# The run's and the plan's shared options: one default each (homespec.plan.settings).
CtxOpt = Annotated[int, number(limits.CTX, help="Context length in tokens.")]
DepthOpt = Annotated[Optional[int], number(
    limits.DRAFT_DEPTH, help=f"Longest draft path. Default: {CPU_DRAFT[0]} on a CPU, {GPU_DRAFT[0]} on a GPU.")]
TopkOpt = Annotated[Optional[int], number(
    limits.DRAFT_TOPK, help=f"Children per expanded tree node (1 = a chain). Default: {CPU_DRAFT[1]} on a CPU, "
    f"{GPU_DRAFT[1]} on a GPU.")]
NodesOpt = Annotated[Optional[int], number(
    limits.DRAFT_TOKENS, help=f"Draft tree nodes, the root included. Default: {CPU_DRAFT[2]} on a CPU, "
    f"{GPU_DRAFT[2]} on a GPU.")]
WindowOpt = Annotated[Optional[int], number(
    limits.WINDOW, help="EAGLE head attends to the newest N entries (plus the first 4); default: the length the head "
    "was trained on when its config records it; 0: all.")]
DraftDtypeOpt = Annotated[str, typer.Option(
    "--draft-dtype", help="The EAGLE head's matrices in llama.cpp: q8_0 (about half of f16's memory; its "
    "acceptance within 1 % of f16's, docs/interop.md) or f16. The head is converted once to an eagle3 GGUF and "
    "cached.")]

# The running commands' options (generate, bench, chat).
ModelOpt = Annotated[Optional[str], typer.Option("--model", "-m", help="GGUF file, Hugging Face directory, org/repo[:QUANT] (downloaded into the hub cache), ollama:NAME[:TAG] or lmstudio:PUB/REPO (see `homespec models`). Default: the embedded SmolLM2-135M-Instruct.")]
DraftOpt = Annotated[Optional[str], typer.Option("--draft", help="auto (default): the EAGLE head paired with --model on this machine (else prompt lookups, and the command that fetches the catalogue's head); none; a catalogue head id; a head directory or eagle3 .gguf; a head's hub repo org/repo. --method draft: a small GGUF/HF model, or any --model spelling.")]
MethodOpt = Annotated[str, typer.Option("--method", help="auto (each step: prompt lookup, the suffix store or the model drafter, whichever pays: the model's own MTP layers where it has them, else the EAGLE head), none, ngram, suffix, draft, eagle3 or mtp.")]
BackendOpt = Annotated[str, typer.Option("--backend", help="llamacpp, torch or exl2.")]


def max_tokens_opt(help: str) -> typer.models.OptionInfo:
    return number(limits.MAX_TOKENS, "--max-tokens", "-n", help=help)


def threads_for_run(threads: int | None) -> int | None:
    """--threads, else HOMESPEC_THREADS, capped at the CPUs this process may use (saying so once)."""
    import sys

    source = "--threads"
    if threads is None:
        threads, source = limits.env_threads(), "HOMESPEC_THREADS"
    if threads is None:
        return None
    threads, note = limits.cap_threads(threads, source)
    if note:
        print(note, file=sys.stderr)
    return threads


@dataclass(frozen=True, slots=True, kw_only=True)
class RunArgs:
    """The shared run options as a command parsed them (None: left to the run's default), built by
    keyword once per command and turned into the engine's RunOptions in one place: `options()`."""

    model: str | None = None
    draft: str | None = None
    method: str = "auto"
    backend: str = "llamacpp"
    ctx: int = DEFAULT_CTX
    draft_depth: int | None = None
    draft_topk: int | None = None
    draft_tokens: int | None = None
    device: str | None = None
    threads: int | None = None
    exact: bool = False
    window: int | None = None
    draft_dtype: str = "q8_0"
    guard: bool = False
    adapt: bool = False

    def options(self) -> "RunOptions":
        """The RunOptions of these arguments: --threads capped (saying so), the draft shape the user
        left open filled from what the target runs on (homespec.engine.options.draft_shape)."""
        threads = threads_for_run(self.threads)  # its note comes before the machine is probed
        depth, topk, nodes = lazy.draft_shape(self.backend, self.device, self.draft_depth, self.draft_topk,
                                              self.draft_tokens, self.method)
        return lazy.RunOptions(model=self.model, draft=self.draft, method=self.method, backend=self.backend,
                               device=self.device, ctx=self.ctx, draft_depth=depth, draft_topk=topk,
                               draft_tokens=nodes, threads=threads, exact=self.exact, window=self.window,
                               draft_dtype=self.draft_dtype, guard=self.guard, adapt=self.adapt)
