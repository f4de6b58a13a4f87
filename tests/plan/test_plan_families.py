"""The planner's MoE, sliding-window, hybrid and MLA figures against what llama.cpp allocates.

Each family's tiny GGUF (tests/tiny_families.py, tensors from homespec's own prediction) is loaded by
the vendored llama.cpp in a subprocess through the low-level context API (so n_seq_max and swa_full can
be set), and its "<buffer> model/KV/RS/compute buffer size = X MiB" log lines are compared with the
plan for the same settings: weights, KV and recurrent state within 1 % (or the log's 2-decimal MiB),
compute within 10 %.
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
from homespec.plan.lines import LineKind

MIB = 1 << 20

# One process per file: load the model once, then build one context per config (n_ctx is per
# sequence here; llama.cpp's n_ctx is the total, n_ctx x n_seq, split into n_seq streams).
_PROBE = r"""
import json, sys, llama_cpp
path, configs = sys.argv[1], json.loads(sys.argv[2])
types = {"f16": 1, "q8_0": 8, "q4_0": 2}
llama_cpp.llama_backend_init()
model = llama_cpp.llama_model_load_from_file(path.encode(), llama_cpp.llama_model_default_params())
if not model:
    sys.exit(3)
for c in configs:
    print("@@config", json.dumps(c), file=sys.stderr, flush=True)
    cp = llama_cpp.llama_context_default_params()
    cp.n_ctx = c["n_ctx"] * c["n_seq"]; cp.n_batch = 512; cp.n_ubatch = c["n_ubatch"]
    cp.flash_attn_type = 1 if c["fa"] else 0
    cp.type_k = cp.type_v = types[c["kv"]]
    cp.n_seq_max = c["n_seq"]; cp.kv_unified = False; cp.swa_full = c["swa_full"]
    cp.n_threads = cp.n_threads_batch = 1
    ctx = llama_cpp.llama_init_from_model(model, cp)
    if not ctx:
        sys.exit(4)
    llama_cpp.llama_free(ctx)
llama_cpp.llama_model_free(model)
"""
_LINE = re.compile(r"(\S+) (model|KV|RS|compute) buffer size =\s+([\d.]+) MiB")


def llamacpp_buffers(path: Path, configs: list[dict]) -> tuple[float, list[dict[str, float]]]:
    """(model bytes, per config {KV, RS, compute} bytes) from llama.cpp's log."""
    r = subprocess.run([sys.executable, "-c", _PROBE, str(path), json.dumps(configs)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    model, out = 0.0, []
    for line in r.stderr.splitlines():
        if line.startswith("@@config"):
            out.append({"KV": 0.0, "RS": 0.0})
            continue
        m = _LINE.search(line)
        if not m:
            continue
        n_bytes = float(m.group(3)) * MIB
        if m.group(2) == "model":
            model += n_bytes
        elif out:
            out[-1][m.group(2)] = (out[-1].get(m.group(2), 0.0) if m.group(2) != "compute" else 0.0) + n_bytes
    return model, out


def _config(n_ctx=4096, n_ubatch=512, fa=True, kv="f16", n_seq=1, swa_full=False) -> dict:
    return dict(n_ctx=n_ctx, n_ubatch=n_ubatch, fa=fa, kv=kv, n_seq=n_seq, swa_full=swa_full)


CONFIGS = [_config(), _config(n_ctx=2048, n_ubatch=256, fa=False), _config(n_ctx=1000, n_seq=2),
           _config(swa_full=True)]


def this_cpu_machine():
    from conftest import this_cpu_machine as machine

    return machine()


def this_cpu_buffers() -> str:
    from conftest import this_cpu_buffers as buffers

    return buffers()


def _planned(spec, c: dict) -> dict[str, int]:
    s = Settings(backend="llamacpp", n_ctx=c["n_ctx"], n_ubatch=c["n_ubatch"], flash_attn=c["fa"],
                 type_k=c["kv"], type_v=c["kv"], n_seq=c["n_seq"], swa_full=c["swa_full"], cpu_buffers=this_cpu_buffers())
    plan = solve(spec, None, this_cpu_machine(), s)
    names = {"model": (LineKind.WEIGHTS, LineKind.WEIGHTS_CPU_REPACK, LineKind.WEIGHTS_AMX), "KV": (LineKind.TARGET_KV,), "RS": (LineKind.RECURRENT_STATE,),
             "compute": (LineKind.COMPUTE,)}
    return {k: sum(i.bytes for i in plan.items if i.kind in v) for k, v in names.items()}


def _close(got: float, want: float, tol: float) -> bool:
    return abs(got - want) <= max(tol * want, 0.006 * MIB)  # the log prints MiB with 2 decimals


@pytest.fixture(scope="module")
def family_files(tmp_path_factory):
    from tiny_families import FAMILIES, make_family_gguf

    root = tmp_path_factory.mktemp("families")
    return {f: make_family_gguf(root / f"{f}.gguf", f) for f in FAMILIES}


@pytest.mark.slow
@pytest.mark.parametrize("family", ["qwen3moe", "gpt-oss", "gemma3", "qwen3next", "qwen35moe", "deepseek2",
                                    "glm4", "glm4moe", "llama4", "command-r"])
def test_family_buffers_match_llamacpp(family_files, family):
    path = family_files[family]
    spec = model_spec_from_gguf(read_gguf_header(path))
    model_bytes, reported = llamacpp_buffers(path, CONFIGS)
    assert len(reported) == len(CONFIGS)
    failures = []
    for c, rep in zip(CONFIGS, reported):
        got = _planned(spec, c)
        if not _close(got["model"], model_bytes, 0.01):
            failures.append(f"{c}: weights planned {got['model'] / MIB:.2f} MiB, llama.cpp {model_bytes / MIB:.2f}")
        for kind, tol in (("KV", 0.01), ("RS", 0.01), ("compute", 0.10)):
            if not _close(got[kind], rep.get(kind, 0.0), tol):
                failures.append(f"{c}: {kind} planned {got[kind] / MIB:.3f} MiB, llama.cpp {rep.get(kind, 0) / MIB:.3f}")
    assert failures == []


# Experts wide enough that the FFN phase, not the logits, sets the compute buffer: 8 experts of 4096
# all chosen per token.
WIDE_EXPERTS = [("qwen3moe", dict(n_layer=2, n_expert=8, n_expert_used=8, n_ff_exp=4096)),
                ("qwen3next", dict(n_expert=8, n_expert_used=8, n_ff_exp=4096, n_ff_shexp=2048)),
                ("deepseek2", dict(n_layer=2, n_expert=8, n_expert_used=8, n_ff_exp=4096, n_ff=8192))]


@pytest.mark.slow
@pytest.mark.parametrize("family,shape", WIDE_EXPERTS, ids=[f for f, _ in WIDE_EXPERTS])
def test_moe_compute_buffer_matches_llamacpp(tmp_path, family, shape):
    from tiny_families import make_family_gguf

    path = make_family_gguf(tmp_path / f"{family}.gguf", family, **shape)
    spec = model_spec_from_gguf(read_gguf_header(path))
    configs = [_config(), _config(n_ctx=2048, n_ubatch=256, fa=False), _config(n_ctx=16384)]
    _, reported = llamacpp_buffers(path, configs)
    for c, rep in zip(configs, reported):
        got = _planned(spec, c)["compute"]
        assert _close(got, rep["compute"], 0.10), (c, got / MIB, rep["compute"] / MIB)


def test_family_specs_read_from_their_headers(family_files):
    """What the GGUF reader takes from each family's hparams."""
    spec = {f: model_spec_from_gguf(read_gguf_header(p)) for f, p in family_files.items()}
    assert (spec["qwen3moe"].n_expert, spec["qwen3moe"].n_expert_used, spec["qwen3moe"].n_ff_exp) == (4, 2, 32)
    assert spec["gpt-oss"].swa_layers == (0, 2) and spec["gpt-oss"].sliding_window == 128
    assert spec["gemma3"].swa_layers == (0, 1, 2, 3, 4)
    assert spec["qwen3next"].recurrent_layers == (0, 1, 2)
    assert (spec["qwen3next"].rs_r, spec["qwen3next"].rs_s) == (3 * (64 + 2 * 32), 16 * 64)
    ds = spec["deepseek2"]
    assert (ds.kv_lora_rank, ds.qk_rope_head_dim, ds.n_layer_dense_lead, ds.n_expert_shared) == (32, 16, 1, 1)
    for s in spec.values():
        assert s.kv_rule_note == ""
