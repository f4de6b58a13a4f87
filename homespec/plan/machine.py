"""The machine a plan is for: probed (--gpu auto), named from the catalogue, or CPU only."""

from __future__ import annotations

from dataclasses import replace

from homespec.errors import UsageError
from homespec.specs import Machine

GIB = 1 << 30


def machine_from_args(gpu_arg: str, ram_gib: float | None = None) -> Machine:
    """`auto` probes this machine; `none`/`cpu` plans for the CPU alone; otherwise a comma list of
    catalogue GPU names (`4090`, `4090,3090`, `m3-ultra-512`), with this machine's RAM unless
    --ram says otherwise (a named Mac brings its own unified memory)."""
    from homespec.hardware.probe import probe

    arg = (gpu_arg or "auto").strip()
    if arg.lower() == "auto":
        m = probe()
    elif arg.lower() in ("none", "cpu"):
        m = replace(probe(), gpus=())
    else:
        from homespec.catalog import load_catalog

        cat = load_catalog()
        names = [n.strip() for n in arg.split(",") if n.strip()]
        if not names:
            raise UsageError("--gpu is empty", hint="use --gpu auto, --gpu none, or names such as --gpu 4090,3090")
        gpus = tuple(replace(cat.gpu(n), index=i) for i, n in enumerate(names))
        host = probe()
        ram = host.ram_bytes
        if all(g.vendor == "apple" for g in gpus):
            ram = gpus[0].total_bytes  # a Mac's GPU memory is its RAM
        m = replace(host, gpus=gpus, ram_bytes=ram, ram_free_bytes=None, source="catalogue")
        if all(g.vendor == "apple" for g in gpus):
            m = replace(m, ram_bandwidth_gbs=gpus[0].bandwidth_gbs)
    if ram_gib is not None:
        if not 0.5 <= ram_gib <= 65536:
            raise UsageError(f"--ram {ram_gib} GiB is out of range", hint="give the machine's RAM in GiB, e.g. --ram 64")
        m = replace(m, ram_bytes=int(ram_gib * GIB), ram_free_bytes=None)
    return m
