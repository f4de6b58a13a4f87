"""`homespec probe` as a rich table."""

from __future__ import annotations

from homespec.types import Machine

GIB = 1 << 30


def render_machine(m: Machine, console) -> None:
    from rich.table import Table

    if m.gpus:
        t = Table(title="GPUs")
        for col in ("#", "name", "memory", "free", "bandwidth", "compute", "driver", "source"):
            t.add_column(col, justify="right" if col in ("memory", "free", "bandwidth") else "left")
        for g in m.gpus:
            t.add_row(
                str(g.index), g.name, f"{g.total_bytes / GIB:,.1f} GiB",
                "" if g.free_bytes is None else f"{g.free_bytes / GIB:,.1f} GiB",
                "" if g.bandwidth_gbs is None else f"{g.bandwidth_gbs:,.0f} GB/s",
                g.compute_capability or ("unified memory" if g.unified else ""), g.driver or "", g.source,
            )
        console.print(t)
    else:
        console.print("no GPU found: homespec will plan and run on the CPU")
    free = "" if m.ram_free_bytes is None else f" ({m.ram_free_bytes / GIB:,.1f} GiB free)"
    console.print(f"RAM: {m.ram_bytes / GIB:,.1f} GiB{free}")
    console.print(f"CPU: {m.cpu_name or 'unknown'}, {m.cpu_cores} cores; OS: {m.os}")


def render_cpu_build(isa: dict[str, bool], build: dict | None, console) -> None:
    """The CPU's instruction sets and the llama.cpp build's use of them, two or three lines."""
    if isa:
        console.print("CPU instruction sets: " + ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in isa.items()),
                      soft_wrap=True)
    if build is None:
        console.print("llama.cpp: not installed (`bash scripts/setup.sh` builds it for this machine)")
        return
    if "error" in build:
        console.print(f"llama.cpp: installed but not usable: {build['error']}")
        return
    used = ", ".join(k for k, v in build["features"].items() if v) or "none of these"
    variant = f" ({build['variant']} build)" if build.get("variant") else ""
    console.print(f"llama.cpp{variant} uses: {used}", soft_wrap=True)
    if "AMX" in isa:
        console.print(f"AMX: {build['amx']}", soft_wrap=True)
    if "eagle3_1" in build:
        missing = build.get("missing_entry_points") or []
        console.print("EAGLE-3.1 heads: " + ("run as they are (homespec's llama.cpp patch)" if build["eagle3_1"] else
                                            "run as their EAGLE-3 twin (this llama.cpp lacks homespec's patch; "
                                            "`bash scripts/setup.sh` builds it)")
                      + (f"; missing entry points: {', '.join(missing)}" if missing else ""), soft_wrap=True)
