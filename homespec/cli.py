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

from homespec.errors import EXIT_NO_FIT, EXIT_RUNTIME, HomespecError, UsageError

app = typer.Typer(
    name="homespec",
    help="Will this model, with an EAGLE-3 draft head, fit on my machine, and how fast will it run?",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]


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
    ctx: Annotated[int, typer.Option("--ctx", help="Context length in tokens.")] = 8192,
    kv_type: Annotated[str, typer.Option("--kv-type", help="KV cache type: f16, q8_0, q4_0 (exl2: f16, q8, q6, q4).")] = "f16",
    flash_attn: Annotated[bool, typer.Option("--flash-attn/--no-flash-attn", help="Flash attention (needed for a quantised V cache).")] = True,
    ubatch: Annotated[int, typer.Option("--ubatch", help="Physical batch size (llama.cpp -ub).")] = 512,
    backend: Annotated[Optional[str], typer.Option("--backend", help="llamacpp, exl2 or torch. Default: from the model's format.")] = None,
    draft_tokens: Annotated[int, typer.Option("--draft-tokens", help="Draft tree nodes verified per step.")] = 60,
    ram: Annotated[Optional[float], typer.Option("--ram", help="Host RAM in GiB (default: this machine's).")] = None,
    emit: Annotated[Optional[str], typer.Option("--emit", help="Print the llama-server or vllm command line for this plan.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Budget memory for the target, the draft head and both KV caches; say whether it fits and how fast it runs."""
    from homespec.plan.api import make_plan
    from homespec.plan.render import emit as emit_cmd, render, to_json

    p = make_plan(model=model, gpu=gpu, draft=draft, quant=quant, ctx=ctx, kv_type=kv_type, flash_attn=flash_attn,
                  ubatch=ubatch, backend=backend, draft_tokens=draft_tokens, ram=ram)
    if emit:
        print(emit_cmd(p, emit, model, draft))
    elif json_out:
        print(json.dumps(to_json(p), indent=2))
    else:
        render(p, _stdout())
    if not p.fits:
        raise typer.Exit(EXIT_NO_FIT)


def main(argv: list[str] | None = None) -> int:
    """Entry point: turn known errors into two lines on stderr and an exit code."""
    try:
        app(args=argv, standalone_mode=True)
        return 0
    except SystemExit as e:  # typer/click exit with the command's code
        return int(e.code or 0) if not isinstance(e.code, str) else 1
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
