"""`homespec probe`: what this machine has. No GPU is a normal answer, never an error."""

from __future__ import annotations

from homespec.catalog import load_catalog
from homespec.errors import HomespecError
from homespec.hardware.apple import SysctlReading, catalogue_id, gpu_from_sysctl, read_sysctl
from homespec.hardware.cpu import read_host
from homespec.hardware.isa import apple_features, cpu_flags, llama_features
from homespec.hardware.nvidia import gpus_from_nvml, read_nvml
from homespec.types import GPU, Machine


def _catalogue_bandwidth(reading: SysctlReading) -> float | None:
    """Apple chips do not report bandwidth; the catalogue knows it for the Macs it lists."""
    try:
        return load_catalog().gpu(catalogue_id(reading)).bandwidth_gbs
    except HomespecError:  # a Mac the catalogue does not list: bandwidth stays unknown
        return None


def probe() -> Machine:
    host = read_host()
    gpus: tuple[GPU, ...] = gpus_from_nvml(read_nvml())
    apple = read_sysctl()
    if apple is not None:
        gpus += (gpu_from_sysctl(apple, _catalogue_bandwidth),)
    return Machine(
        gpus=gpus,
        ram_bytes=host.ram_bytes,
        ram_free_bytes=host.ram_free_bytes,
        cpu_name=host.cpu_name,
        cpu_cores=host.cpu_cores,
        os=host.os,
        source="probe",
        cpu_features=apple_features(apple.chip) if apple is not None else llama_features(cpu_flags()),
    )


def probe_json(machine: Machine) -> dict:
    """`homespec probe --json`: plain types, bytes as ints."""
    return {
        "gpus": [
            {
                "index": g.index,
                "name": g.name,
                "vendor": g.vendor,
                "total_bytes": g.total_bytes,
                "free_bytes": g.free_bytes,
                "bandwidth_gbs": g.bandwidth_gbs,
                "unified": g.unified,
                "compute_capability": g.compute_capability,
                "bus_width_bits": g.bus_width_bits,
                "mem_clock_mhz": g.mem_clock_mhz,
                "driver": g.driver,
                "source": g.source,
            }
            for g in machine.gpus
        ],
        "ram_bytes": machine.ram_bytes,
        "ram_free_bytes": machine.ram_free_bytes,
        "cpu_name": machine.cpu_name,
        "cpu_cores": machine.cpu_cores,
        "os": machine.os,
        "ram_bandwidth_gbs": machine.ram_bandwidth_gbs,
        "source": machine.source,
    }
