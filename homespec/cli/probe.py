"""`homespec probe`: this machine's GPUs, RAM and CPU, and what the installed llama.cpp does with the CPU."""

from __future__ import annotations

import json

from homespec.cli import lazy
from homespec.cli.app import _stdout, app
from homespec.cli.options import JsonOpt


@app.command()
def probe(json_out: JsonOpt = False) -> None:
    """Find this machine's GPUs (NVIDIA via NVML, Apple Silicon via sysctl), RAM and CPU, the CPU's
    instruction sets that llama.cpp uses, and what the installed llama.cpp build does with them."""
    m = lazy.run_probe()
    isa = lazy.cpu_isa(lazy.cpu_flags())
    build = lazy.build_report(isa.get("AMX", False))
    if json_out:
        print(json.dumps({**lazy.probe_json(m), "cpu_isa": isa, "llama_cpp": build}, indent=2))
        return
    console = _stdout()
    lazy.render_machine(m, console)
    lazy.render_cpu_build(isa, build, console)
