"""Hardware probe: raw NVML / sysctl readings -> GPU specs, and the real probe on this machine."""

from __future__ import annotations

import json

import pytest

from homespec.hardware.apple import SysctlReading, catalogue_id, default_working_set, gpu_from_sysctl, gpu_limit_bytes
from homespec.hardware.nvidia import NvmlReading, bandwidth_gbs, gpus_from_nvml, read_nvml
from homespec.hardware.probe import _catalogue_bandwidth, probe, probe_json
from homespec.types import Machine

GIB = 1024**3


@pytest.mark.parametrize("bus, clock, published", [
    (384, 10501, 1008.0),  # RTX 4090 (GDDR6X), NVIDIA spec sheet 1008 GB/s
    (384, 9751, 936.0),  # RTX 3090 (GDDR6X), 936 GB/s
    (5120, 1215, 1555.0),  # A100 40GB (HBM2), 1555 GB/s
    (6144, 3201, 4800.0),  # H200 (HBM3e), 4.8 TB/s
])
def test_bandwidth_from_bus_width_and_clock(bus, clock, published):
    assert bandwidth_gbs(bus, clock) == pytest.approx(published, rel=0.025)


def test_gpus_from_recorded_nvml_readings():
    readings = [
        NvmlReading(0, "NVIDIA GeForce RTX 4090", 25757220864, 25234341888, 384, 10501, (8, 9), "560.35.03"),
        NvmlReading(1, "NVIDIA GeForce RTX 3090", 25769803776, 24000000000, 384, 9751, (8, 6), "560.35.03"),
        NvmlReading(2, "GRID vGPU", 8 * GIB, 8 * GIB, None, None, None, "560.35.03"),
    ]
    gpus = gpus_from_nvml(readings)
    assert [g.index for g in gpus] == [0, 1, 2] and all(g.vendor == "nvidia" and g.source == "nvml" for g in gpus)
    assert gpus[0].compute_capability == "8.9" and round(gpus[0].bandwidth_gbs) == 1008
    assert gpus[0].total_bytes == 25757220864 and isinstance(gpus[0].total_bytes, int)
    assert gpus[2].bandwidth_gbs is None and gpus[2].compute_capability is None


@pytest.mark.parametrize("gib, expected_mib", [(16, 10922.67), (32, 21845.33), (64, 49152.0), (128, 98304.0)])
def test_apple_default_working_set_matches_metal_reports(gib, expected_mib):
    # recommendedMaxWorkingSetSize as llama.cpp's Metal backend logs it (docs/probe.md)
    assert default_working_set(gib * GIB) / 2**20 == pytest.approx(expected_mib, abs=0.01)


def test_apple_wired_limit_overrides_the_default():
    base = SysctlReading("Apple M2 Max", 64 * GIB, 0)
    assert gpu_limit_bytes(base) == 48 * GIB
    assert gpu_limit_bytes(SysctlReading("Apple M2 Max", 64 * GIB, 58000)) == 58000 * 2**20
    assert gpu_limit_bytes(SysctlReading("Apple M2 Max", 64 * GIB, None)) == 48 * GIB
    gpu = gpu_from_sysctl(base, _catalogue_bandwidth)
    assert gpu.vendor == "apple" and gpu.unified and gpu.bandwidth_gbs == 400.0 and gpu.source == "sysctl"
    assert catalogue_id(SysctlReading("Apple M3 Max", 36 * GIB, 0)) == "m3-max-36"
    assert gpu_from_sysctl(SysctlReading("Apple M9 Hyper", 64 * GIB, 0), _catalogue_bandwidth).bandwidth_gbs is None


def test_real_probe_on_this_machine():
    machine = probe()
    assert isinstance(machine, Machine) and machine.ram_bytes > 0 and machine.cpu_cores > 0
    assert machine.source == "probe"
    assert read_nvml() == () or all(g.vendor == "nvidia" for g in machine.gpus)
    data = json.loads(json.dumps(probe_json(machine)))
    assert data["ram_bytes"] == machine.ram_bytes and isinstance(data["ram_bytes"], int)
    assert len(data["gpus"]) == len(machine.gpus)


@pytest.mark.gpu
def test_nvml_sees_the_cuda_gpu():
    gpus = gpus_from_nvml(read_nvml())
    assert gpus and gpus[0].total_bytes > 0 and gpus[0].bandwidth_gbs and gpus[0].bandwidth_gbs > 100
