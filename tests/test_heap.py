"""homespec.heap: freed memory is reused instead of faulted in again; switchable."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# attention-sized temporaries, as a training or draft step makes them: 75 MB of scores per call
CHILD = (
    "import resource, torch\n"
    "from homespec.heap import keep_freed_memory\n"
    "on = keep_freed_memory()\n"
    "assert keep_freed_memory() is on\n"
    "torch.set_num_threads(1)\n"
    "a = torch.randn(2, 9, 1024, 64)\n"
    "for i in range(12):\n"
    "    if i == 6:\n"
    "        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
    "    (a @ a.transpose(-1, -2)).softmax(-1) @ a\n"
    "print(on, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)\n"
)


def _run(env_value: str) -> tuple[bool, int]:
    env = {**os.environ, "HOMESPEC_KEEP_HEAP": env_value}
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True).stdout.split()
    return out[0] == "True", int(out[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc settings")
def test_freed_memory_is_reused_instead_of_faulted_in_again():
    """Six steady-state steps: with the heap kept they reuse freed pages; with glibc's defaults
    each large temporary is a fresh mapping, faulted in 4 KiB page by page."""
    on, faults_on = _run("1")
    off, faults_off = _run("0")
    assert on and not off
    assert faults_off > 50_000 and faults_on < faults_off / 20
