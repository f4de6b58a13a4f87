"""`homespec plan`: does the target with its draft head fit, and how fast will it run."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Optional

import typer

from homespec import limits
from homespec.cli import lazy
from homespec.cli.app import _stdout, app
from homespec.cli.options import CtxOpt, DepthOpt, DraftDtypeOpt, JsonOpt, NodesOpt, TopkOpt, number
from homespec.errors import EXIT_NO_FIT
from homespec.plan.settings import DEFAULT_CTX


@app.command()
def plan(
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="Catalogue name (llama-3.1-70b-q4), GGUF path or URL, org/repo[:QUANT] (header read by range), ollama:NAME[:TAG], lmstudio:PUB/REPO, config.json, or EXL2 dir. Default: the embedded SmolLM2-135M.")] = None,
    gpu: Annotated[str, typer.Option("--gpu", help="auto (probe), none, or catalogue names: 4090 / 4090,3090 / m3-ultra-512.")] = "auto",
    draft: Annotated[Optional[str], typer.Option("--draft", help="Draft head or model: auto (default: the head a run pairs with the model), none, mtp, a catalogue name, a checkpoint dir or its hub repo (org/repo), an eagle3 or draft-model GGUF.")] = None,
    quant: Annotated[Optional[str], typer.Option("--quant", help="Quantisation for a config.json model (Q4_K_M, Q8_0, exl2-4.65, ...).")] = None,
    ctx: CtxOpt = DEFAULT_CTX,
    kv_type: Annotated[str, typer.Option("--kv-type", help="KV cache type: f16, q8_0, q4_0 (exl2: f16, q8, q6, q4).")] = "f16",
    flash_attn: Annotated[bool, typer.Option("--flash-attn/--no-flash-attn", help="Flash attention (needed for a quantised V cache).")] = True,
    ubatch: Annotated[int, number(limits.UBATCH, help="Physical batch size (llama.cpp -ub).")] = 512,
    backend: Annotated[Optional[str], typer.Option("--backend", help="llamacpp, exl2 or torch. Default: from the model's format.")] = None,
    draft_tokens: NodesOpt = None,
    draft_depth: DepthOpt = None,
    draft_topk: TopkOpt = None,
    draft_dtype: DraftDtypeOpt = "q8_0",
    ram: Annotated[Optional[float], number(limits.RAM_GIB, help="Host RAM in GiB (default: this machine's).")] = None,
    emit: Annotated[Optional[str], typer.Option("--emit", help="Print the llama-server or vllm command line for this plan (with --json: as the 'emit' field).")] = None,
    calibrate: Annotated[Optional[str], typer.Option("--calibrate", help="A `homespec bench --json` result from this machine: corrects speed, memory and acceptance.")] = None,
    n_cpu_moe: Annotated[Optional[int], number(limits.N_CPU_MOE, help="MoE: keep the routed experts of the first N layers in RAM (llama.cpp --n-cpu-moe). Default: the solver chooses.")] = None,
    parallel: Annotated[int, number(limits.PARALLEL, "--parallel", "-np", help="Sequences served at once, each with --ctx tokens of KV (llama-server -np).")] = 1,
    swa_full: Annotated[bool, typer.Option("--swa-full", help="Sliding-window layers keep the whole context (llama.cpp --swa-full).")] = False,
    max_parallel: Annotated[bool, typer.Option("--max-parallel", help="Plan the most sequences of --ctx tokens that fit (how many users at this context), the draft's KV per sequence included.")] = False,
    remote: Annotated[Optional[list[str]], typer.Option("--remote", help="Another machine's GPUs, served by llama.cpp's RPC backend: GPU[,GPU...]@HOST[:PORT] (catalogue names; repeat per machine), e.g. --remote 3090@host2 --remote m3-ultra-96@mac.")] = None,
    link: Annotated[Optional[str], typer.Option("--link", help="The network to the --remote machines: 1gbe (default), 2.5gbe, 5gbe, 10gbe, 25gbe, tb4, tb5, or a line rate in Gbit/s.")] = None,
    cache_ram: Annotated[int, number(limits.CACHE_RAM_MIB, help="MiB of host RAM `homespec serve --cache-ram` keeps for idle conversations: budgeted on the host.")] = 0,
    workload: Annotated[Optional[str], typer.Option("--workload", help="chat or code-edit: say which drafter (prompt lookup, the suffix store, the draft head) is expected to pay on it, with homespec's measured acceptance of each.")] = None,
    gpu_memory_utilization: Annotated[float, number(limits.GPU_MEMORY_UTILIZATION, help="--emit vllm: the share of each GPU vLLM may use (its KV capacity is reported at it).")] = 0.9,
    json_out: JsonOpt = False,
) -> None:
    """Budget memory for the target, the draft head and both KV caches; say whether it fits and how fast it runs."""
    p = lazy.make_plan(lazy.PlanRequest(
        model=model, gpu=gpu, draft=draft, quant=quant, ctx=ctx, kv_type=kv_type, flash_attn=flash_attn,
        ubatch=ubatch, backend=backend, draft_tokens=draft_tokens, draft_depth=draft_depth, draft_topk=draft_topk,
        ram=ram, calibrate=calibrate, n_cpu_moe=n_cpu_moe, parallel=parallel, swa_full=swa_full,
        max_parallel=max_parallel, remote=tuple(remote or ()), link=link, cache_ram=cache_ram, workload=workload,
        draft_dtype=draft_dtype))
    for note in p.notes:
        if note.startswith("warning: "):  # an assumption the user should know of, also with --json
            print(note, file=sys.stderr)
    emitted = None
    if emit:
        emitted = lazy.emit_command(p, emit, model, draft, gpu_memory_utilization=gpu_memory_utilization)
        for note in emitted.notes:  # what the command still needs before it runs as printed
            print(f"warning: {note}", file=sys.stderr)
    if json_out:
        print(json.dumps(lazy.plan_json(p) | ({"emit": emitted.as_json()} if emitted else {}), indent=2))
    elif emitted:
        print(emitted.text())
    else:
        lazy.render_plan(p, _stdout())
    if not p.fits:
        raise typer.Exit(EXIT_NO_FIT)
