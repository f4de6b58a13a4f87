"""The planner's weights, KV and compute figures against the buffer sizes llama.cpp itself reports.

Each case loads a real GGUF (the SmolLM2 file and generated tiny ones of several shapes and quant
types) in llama-cpp-python, reads llama.cpp's "<dev> <kind> buffer size = X MiB" log lines, and
compares: weights and KV within 1 %, compute within 10 %.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from homespec.formats.gguf import read_gguf_header
from homespec.formats.gguf_model import model_spec_from_gguf
from homespec.plan.fit import solve
from homespec.plan.settings import Settings
from homespec.types import Machine
from homespec.plan.lines import LineKind

MIB = 1 << 20


def this_cpu_buffers() -> str:
    from conftest import this_cpu_buffers as buffers

    return buffers()

# One subprocess loads the model once per config and prints llama.cpp's log lines between markers.
_PROBE = r"""
import json, sys, llama_cpp
path, configs = sys.argv[1], json.loads(sys.argv[2])
types = {"f16": 1, "q8_0": 8, "q4_0": 2}
for c in configs:
    print("@@config", json.dumps(c), file=sys.stderr, flush=True)
    llm = llama_cpp.Llama(model_path=path, n_ctx=c["n_ctx"], n_batch=c["n_batch"], n_ubatch=c["n_ubatch"],
                          flash_attn=c["fa"], type_k=types[c["kv"]], type_v=types[c["kv"]], n_threads=1,
                          verbose=True)
    llm.close()
    del llm
"""
_LINE = re.compile(r"(\S+)\s+(model|KV|compute|output) buffer size =\s+([\d.]+) MiB")
# llama.cpp's weight buffers on the CPU, by the name the plan gives each (homespec.plan.cpu_buffers)
_WEIGHT_BUFFERS = {"CPU_REPACK": "repack", "AMX": "amx"}


def llamacpp_buffers(path: Path, configs: list[dict]) -> list[dict[str, float]]:
    r = subprocess.run([sys.executable, "-c", _PROBE, str(path), json.dumps(configs)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out: list[dict[str, float]] = []
    for line in r.stderr.splitlines():
        if line.startswith("@@config"):
            out.append({})
            continue
        m = _LINE.search(line)
        if m and out:
            kind = _WEIGHT_BUFFERS.get(m.group(1), m.group(2))
            out[-1][kind] = out[-1].get(kind, 0.0) + float(m.group(3)) * MIB
    return out


def cpu_machine() -> Machine:
    from conftest import this_cpu_machine

    return this_cpu_machine()


CONFIGS = [
    dict(n_ctx=512, n_batch=512, n_ubatch=512, fa=True, kv="f16"),
    dict(n_ctx=8192, n_batch=512, n_ubatch=512, fa=True, kv="f16"),
    dict(n_ctx=300, n_batch=512, n_ubatch=512, fa=True, kv="f16"),
    dict(n_ctx=8192, n_batch=512, n_ubatch=512, fa=False, kv="f16"),
    dict(n_ctx=4096, n_batch=512, n_ubatch=128, fa=False, kv="f16"),
    dict(n_ctx=2048, n_batch=512, n_ubatch=512, fa=True, kv="q8_0"),
    dict(n_ctx=4096, n_batch=512, n_ubatch=256, fa=True, kv="q4_0"),
]


def _compare(path: Path, configs: list[dict]) -> list[str]:
    spec = model_spec_from_gguf(read_gguf_header(path))
    reported = llamacpp_buffers(path, configs)
    assert len(reported) == len(configs)
    failures = []
    for c, rep in zip(configs, reported):
        s = Settings(backend="llamacpp", n_ctx=c["n_ctx"], n_batch=c["n_batch"], n_ubatch=c["n_ubatch"],
                     flash_attn=c["fa"], type_k=c["kv"], type_v=c["kv"], cpu_buffers=this_cpu_buffers())
        plan = solve(spec, None, cpu_machine(), s)
        # llama.cpp reports the mmapped file (its span) and each copy it makes for its CPU kernels apart
        got = {k: sum(i.bytes for i in plan.items if i.kind in names)
               for k, names in (("model", (LineKind.WEIGHTS,)), ("repack", (LineKind.WEIGHTS_CPU_REPACK,)),
                                ("amx", (LineKind.WEIGHTS_AMX,)), ("KV", (LineKind.TARGET_KV,)), ("compute", (LineKind.COMPUTE,)),
                                ("output", (LineKind.OUTPUT_BUFFER,)))}
        for kind in ("repack", "amx"):
            if abs(got[kind] - rep.get(kind, 0.0)) > max(0.01 * rep.get(kind, 0.0), 0.006 * MIB):
                failures.append(f"{path.name}: {kind} planned {got[kind] / MIB:.2f} MiB, llama.cpp {rep.get(kind, 0) / MIB:.2f} MiB")
        for kind, tol in (("model", 0.01), ("KV", 0.01), ("compute", 0.10), ("output", 0.01)):
            want = rep[kind]
            err = abs(got[kind] - want) / want
            if abs(got[kind] - want) > max(tol * want, 0.006 * MIB):  # the log prints 2 decimals of MiB
                failures.append(f"{path.name} {c}: {kind} planned {got[kind] / MIB:.2f} MiB, "
                                f"llama.cpp {want / MIB:.2f} MiB ({err:.1%})")
    return failures


@pytest.mark.slow
def test_smollm2_buffers_match_llamacpp(smollm2_path):
    assert _compare(smollm2_path, CONFIGS) == []


@pytest.mark.slow
@pytest.mark.parametrize(
    "shape",
    [
        dict(n_layer=4, n_embd=64, n_head=4, n_head_kv=2, n_ff=128, tied=True, ftype="F32"),
        dict(n_layer=3, n_embd=256, n_head=8, n_head_kv=1, n_ff=704, tied=False, ftype="Q8_0"),
        dict(n_layer=6, n_embd=512, n_head=4, n_head_kv=4, n_ff=1536, tied=False, ftype="Q4_K_M"),
    ],
    ids=["tiny-f32-tied", "mqa-q8_0", "wide-head-q4_k_m"],
)
def test_tiny_gguf_buffers_match_llamacpp(tmp_path, shape):
    from tiny_models import make_tiny_gguf

    path = make_tiny_gguf(tmp_path / "tiny.gguf", **shape)
    configs = CONFIGS[:2] + CONFIGS[3:5]
    if shape["n_embd"] // shape["n_head"] % 32 == 0:  # block-quantised KV needs whole blocks per head
        configs.append(CONFIGS[6])
    assert _compare(path, configs) == []
