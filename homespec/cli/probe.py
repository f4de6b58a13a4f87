"""`homespec probe`: this machine's GPUs, RAM and CPU."""

from __future__ import annotations

import json

from homespec.cli.app import _stdout, app
from homespec.cli.options import JsonOpt


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
