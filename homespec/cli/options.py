"""The options several commands share, as `Annotated` aliases, and the run options they build."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from homespec.plan.settings import CPU_DRAFT, GPU_DRAFT

JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]
ThreadsOpt = Annotated[Optional[int], typer.Option("--threads", help="CPU threads.")]
DeviceOpt = Annotated[Optional[str], typer.Option("--device", help="torch backend: cpu, cuda or mps (auto).")]
ExactOpt = Annotated[bool, typer.Option("--exact", help="llama.cpp: verify with the one-token kernels (bit-exact, slower).")]
GuardOpt = Annotated[bool, typer.Option("--guard/--no-guard", help="Fall back to plain decoding while speculation loses.")]
AdaptOpt = Annotated[bool, typer.Option("--adapt/--no-adapt", help="Accepted for compatibility: the guard sizes the draft depth every step.")]
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

# The running commands' options (generate, bench, chat).
ModelOpt = Annotated[Optional[str], typer.Option("--model", "-m", help="GGUF file, Hugging Face directory, org/repo[:QUANT] (downloaded into the hub cache), ollama:NAME[:TAG] or lmstudio:PUB/REPO (see `homespec models`). Default: the embedded SmolLM2-135M-Instruct.")]
DraftOpt = Annotated[Optional[str], typer.Option("--draft", help="eagle3: head directory (EAGLE-3 layout) or its hub repo org/repo; draft: a small GGUF/HF model, or any --model spelling. Default: the shipped head.")]
MethodOpt = Annotated[str, typer.Option("--method", help="none, ngram, draft or eagle3.")]
BackendOpt = Annotated[str, typer.Option("--backend", help="llamacpp, torch or exl2.")]


def _run_options(model, draft, method, backend, ctx, depth, topk, nodes, device=None, threads=None, exact=False,
                 window=None, guard=False, adapt=False):
    from homespec.engine.options import RunOptions, draft_shape

    depth, topk, nodes = draft_shape(backend, device, depth, topk, nodes)
    return RunOptions(model=model, draft=draft, method=method, backend=backend, device=device, ctx=ctx,
                      draft_depth=depth, draft_topk=topk, draft_tokens=nodes, threads=threads, exact=exact,
                      window=window, guard=guard, adapt=adapt)
