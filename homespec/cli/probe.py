"""`homespec probe`: this machine's GPUs, RAM and CPU, and what the installed llama.cpp does with the CPU."""

from __future__ import annotations

import json

from homespec.cli.app import _stdout, app
from homespec.cli.options import JsonOpt


@app.command()
def probe(json_out: JsonOpt = False) -> None:
    """Find this machine's GPUs (NVIDIA via NVML, Apple Silicon via sysctl), RAM and CPU, the CPU's
    instruction sets that llama.cpp uses, and what the installed llama.cpp build does with them."""
    from homespec.backends.llamacpp.amx import build_report
    from homespec.hardware.isa import cpu_flags, cpu_isa
    from homespec.hardware.probe import probe as run_probe, probe_json

    m = run_probe()
    isa = cpu_isa(cpu_flags())
    build = build_report(isa.get("AMX", False))
    if json_out:
        print(json.dumps({**probe_json(m), "cpu_isa": isa, "llama_cpp": build}, indent=2))
        return
    from homespec.hardware.render import render_cpu_build, render_machine

    console = _stdout()
    render_machine(m, console)
    render_cpu_build(isa, build, console)
