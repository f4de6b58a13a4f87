"""The machine a plan is for: probed (--gpu auto), named from the catalogue, or CPU only."""

from __future__ import annotations

import re
from dataclasses import replace

from homespec.catalog import load_catalog
from homespec.errors import UsageError
from homespec.hardware.isa import apple_features
from homespec.hardware.probe import probe
from homespec.types import GPU, Machine

GIB = 1 << 30
_KEYWORDS = ("auto", "none", "cpu")
_GPU_HINT = "use --gpu auto (probe this machine), --gpu none (CPU only), or catalogue names such as --gpu 4090,3090"


def machine_from_args(gpu_arg: str | None, ram_gib: float | None = None, remotes: tuple[str, ...] = ()) -> Machine:
    """`auto` probes this machine; `none`/`cpu` plans for the CPU alone; otherwise a comma list of
    catalogue GPU names (`4090`, `4090,3090`, `m3-ultra-512`), with this machine's RAM unless
    --ram says otherwise (a named Mac brings its own unified memory). None means `auto`; an empty
    string is a mistake, never a silent probe. `remotes` (`--remote 3090@host2`) adds other machines'
    GPUs, served by llama.cpp's RPC backend: they come first, as llama.cpp puts RPC devices first."""
    arg = "auto" if gpu_arg is None else gpu_arg.strip()
    if not arg:
        raise UsageError("--gpu is empty", hint=_GPU_HINT)
    if arg.lower() == "auto":
        m = probe()
    elif arg.lower() in ("none", "cpu"):
        m = replace(probe(), gpus=())
    else:
        m = _catalogue_machine(arg, probe())
    if ram_gib is not None:
        if not 0.5 <= ram_gib <= 65536:
            raise UsageError(f"--ram {ram_gib} GiB is out of range", hint="give the machine's RAM in GiB, e.g. --ram 64")
        chip = next((g for g in m.gpus if g.unified and g.source == "catalogue" and not g.remote), None)
        if chip is not None and ram_gib * GIB > chip.total_bytes:
            more = "a Mac with more, e.g. --gpu m3-ultra-512" if chip.vendor == "apple" else "a machine with more memory"
            raise UsageError(
                f"--ram {ram_gib:g} GiB is more than the {chip.name} has: its {chip.total_bytes / GIB:g} GiB is all the RAM there is",
                hint=f"drop --ram (a named unified-memory machine brings its memory), or name {more}",
            )
        m = replace(m, ram_bytes=int(ram_gib * GIB), ram_free_bytes=None)
    if remotes:
        far = remote_gpus(remotes)
        m = replace(m, gpus=tuple(replace(g, index=i) for i, g in enumerate((*far, *m.gpus))))
    return m


REMOTE_HINT = "give each other machine as GPU[,GPU...]@HOST[:PORT], e.g. --remote 3090@host2 --remote m3-ultra-96@mac"
DEFAULT_RPC_PORT = 50052  # ggml-rpc-server's default port (tools/rpc/rpc-server.cpp, rpc_server_params)


def remote_gpus(specs: tuple[str, ...]) -> tuple[GPU, ...]:
    """The GPUs of other machines, `NAMES@HOST[:PORT]` each (catalogue names, one machine per spec), in the
    order given: the order of llama-server's --rpc list, which is llama.cpp's device order."""
    cat, out, seen = load_catalog(), [], set()
    for spec in specs:
        names, at, where = spec.strip().partition("@")
        host, _, port = where.partition(":")
        if not at or not names.strip() or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9.\-_]*", host) or \
                (port and not (port.isdigit() and 0 < int(port) < 65536)):
            raise UsageError(f"--remote '{spec}' is not GPUs@HOST[:PORT]", hint=REMOTE_HINT)
        address = f"{host}:{port or DEFAULT_RPC_PORT}"
        if address in seen:
            raise UsageError(f"--remote names {address} twice", hint="list all of a machine's GPUs in one --remote: 3090,3090@host2")
        seen.add(address)
        labels = [n.strip() for n in names.split(",")]
        if any(n.lower() in _KEYWORDS or not n for n in labels):
            raise UsageError(f"--remote '{spec}' needs catalogue GPU names before the @", hint=REMOTE_HINT)
        gpus = tuple(replace(cat.gpu(n), remote=address) for n in labels)
        check_one_machine(gpus, labels)
        out += gpus
    return tuple(out)


def _catalogue_machine(arg: str, host: Machine) -> Machine:
    names = [n.strip() for n in arg.split(",")]
    if any(not n for n in names):
        raise UsageError(f"--gpu '{arg}' has an empty name", hint="separate catalogue names with single commas, e.g. --gpu 4090,3090")
    keyword = next((n for n in names if n.lower() in _KEYWORDS), None)
    if keyword is not None:
        raise UsageError(f"--gpu {keyword} cannot be combined with GPU names", hint=_GPU_HINT)
    cat = load_catalog()
    gpus = tuple(replace(cat.gpu(n), index=i) for i, n in enumerate(names))
    check_one_machine(gpus, names)
    m = replace(host, gpus=gpus, ram_free_bytes=None, source="catalogue")
    if gpus[0].unified:  # a unified chip's GPU memory is its RAM, and its memory bandwidth the CPU's too
        m = replace(m, ram_bytes=gpus[0].total_bytes, ram_bandwidth_gbs=gpus[0].bandwidth_gbs)
    if gpus[0].vendor == "apple":  # the Mac's own cores, not this machine's
        m = replace(m, cpu_features=apple_features(gpus[0].name))
    return m


def check_one_machine(gpus: tuple[GPU, ...], labels: list[str] | None = None) -> None:
    """Refuse GPU lists no one machine can hold; `labels` are the names as the user typed them.

    A unified-memory GPU is part of its chip: an Apple Silicon Mac, a Strix Halo or a DGX Spark has
    exactly one, shares its RAM with it, and is planned alone: never beside a discrete card (a Mac
    takes none llama.cpp can use; on the others a card's memory would not be part of the one pool
    the planner budgets), never beside a second chip (two machines)."""
    name = dict(zip(map(id, gpus), labels or [g.name for g in gpus]))
    chips = [g for g in gpus if g.unified]
    if not chips:
        return
    first = name[id(chips[0])]
    kind = "a Mac" if chips[0].vendor == "apple" else "a unified-memory machine"
    others = [g for g in gpus if not g.unified]
    if others:
        card = name[id(others[0])]
        why = f"a Mac takes no {others[0].vendor.upper()} card" if chips[0].vendor == "apple" else \
            f"{kind} is planned alone (its GPU shares the RAM; a card's memory is not in that pool)"
        raise UsageError(
            f"{card} and {first} cannot be in one machine: {why}",
            hint=f"plan {kind} alone (--gpu {first}) or the PC's cards alone (--gpu {card})",
        )
    if len(chips) > 1:
        what = "Apple GPUs" if all(g.vendor == "apple" for g in chips) else "unified-memory chips"
        raise UsageError(
            f"{len(chips)} {what} ({', '.join(name[id(g)] for g in chips)}) cannot be in one machine: "
            f"{kind} has one chip",
            hint=f"name one, e.g. --gpu {first}",
        )
