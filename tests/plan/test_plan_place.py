"""The invariants every backend's placement keeps (homespec.plan.place), over a sweep of plans:
every backend; CPU-only, one and two GPUs, a Mac; offloaded and does-not-fit cases; --ctx,
--kv-type, --draft none/default; catalogue models including EXL2 quants and models too big for
the machine. The plans come from make_plan, the path `homespec plan` takes."""

from __future__ import annotations

import re

import pytest
from rich.console import Console

from homespec.plan.api import PlanRequest, make_plan
from homespec.plan.devices import HOST, device_label, devices_for
from homespec.plan.fit import FITS, NO_FIT
from homespec.plan.lines import LineKind
from homespec.plan.place import PLACERS, placer
from homespec.plan.render import render, to_json

SMOL = None  # the embedded SmolLM2 GGUF

# (model, --gpu, --ram GiB or None for a Mac's own, other make_plan arguments)
SWEEP = [
    (SMOL, "none", 16, {}),
    (SMOL, "4090", 16, {}),
    (SMOL, "4090,3090", 16, {"ctx": 8192}),
    (SMOL, "m4-pro-24", None, {"kv_type": "q8_0"}),
    (SMOL, "none", 16, {"backend": "torch"}),
    (SMOL, "4090", 16, {"backend": "torch", "draft": "none"}),
    (SMOL, "none", 16, {"ctx": 300, "ubatch": 128, "flash_attn": False}),
    ("llama-3.1-8b-q4", "none", 64, {}),
    ("llama-3.1-8b-q4", "rtx-3060-12g", 64, {"ctx": 32768}),
    ("llama-3.1-8b-q4", "4090", 64, {"backend": "torch"}),
    ("llama-3.1-8b-q4", "m4-pro-24", None, {"backend": "torch"}),
    ("llama-3.1-70b-q4", "4090", 64, {"ctx": 8192}),  # offloaded
    ("llama-3.1-70b-q4", "4090,3090", 64, {"kv_type": "q8_0"}),
    ("llama-3.1-70b-q4", "4090", 16, {}),  # does not fit in RAM either
    ("llama-3.1-70b-q4", "m4-pro-48", None, {"draft": "none"}),
    ("llama-3.1-70b-q4", "none", 64, {"draft": "llama-3.2-1b-q4"}),  # a draft model
    ("llama-3.1-405b-q8", "m3-ultra-512", None, {"ctx": 8192, "draft": "none"}),
    ("llama-3.1-405b-f16", "m3-ultra-512", None, {"ctx": 8192, "draft": "none"}),
    ("llama-3.1-405b-q4", "rtx-3060-12g", 32, {}),
    ("gemma-2-9b", "4090", 64, {"ctx": 16384, "flash_attn": False}),  # sliding-window layers
    ("qwen2.5-7b-q8", "4090,3090", 64, {"kv_type": "q4_0"}),
    ("mistral-7b-exl2-4.65", "4090", 64, {}),
    ("mistral-7b-exl2-4.65", "4090", 64, {"kv_type": "q4", "ctx": 32768}),
    ("llama-3.1-70b-exl2-4.0", "4090,3090", 64, {"draft": "none"}),
    ("llama-3.1-70b-exl2-4.0", "rtx-3060-12g", 64, {}),  # does not fit
    ("qwen2.5-72b-exl2-4.65", "h100-sxm", 64, {"kv_type": "q8"}),
]


def _plan(model, gpu, ram, kw):
    return make_plan(PlanRequest(model=model, gpu=gpu, ram=ram, **kw))


def _ids(case) -> str:
    model, gpu, ram, kw = case
    return "-".join([model or "smollm2", gpu, *(f"{k}={v}" for k, v in kw.items())])


@pytest.fixture(scope="module", params=SWEEP, ids=_ids)
def plan(request):
    return _plan(*request.param)


def test_the_sweep_covers_every_backend_and_verdict():
    """The sweep below means something only if it reaches every placement rule."""
    assert {kw.get("backend") for *_, kw in SWEEP} >= {None, "torch"}
    assert any("exl2" in (m or "") for m, *_ in SWEEP)
    assert set(PLACERS) == {"llamacpp", "exl2", "torch"}


def test_line_items_sum_to_the_totals(plan):
    assert all(i.bytes >= 0 for i in plan.items)
    assert plan.total_bytes == sum(i.bytes for i in plan.items) == sum(u.used_bytes for u in plan.devices)
    for u in plan.devices:
        assert u.used_bytes == sum(i.bytes for i in plan.items if i.device == u.device.id)
    j = to_json(plan)
    assert j["total_bytes"] == sum(i["bytes"] for i in j["items"]) == sum(d["used_bytes"] for d in j["devices"])


def test_nothing_is_placed_on_a_device_the_machine_lacks(plan):
    ids = [d.id for d in devices_for(plan.machine)]
    assert ids == [*range(len(plan.machine.gpus)), HOST]
    assert [u.device.id for u in plan.devices] == ids
    assert {i.device for i in plan.items} <= set(ids)
    assert len(plan.settings.layer_split) <= len(plan.machine.gpus)


def test_json_names_a_line_by_its_kinds_label_and_a_device_as_printed(plan):
    j = to_json(plan)
    assert [(x["name"], x["device"]) for x in j["items"]] == [(i.kind.label, device_label(i.device)) for i in plan.items]
    assert [d["id"] for d in j["devices"]] == [*(f"gpu{i}" for i in range(len(plan.machine.gpus))), "host"]


def test_the_table_lists_the_kinds_in_the_enums_order(plan):
    console = Console(record=True, width=400, color_system=None)
    render(plan, console)
    text = console.export_text()
    where = {k: m.start() for k in LineKind if (m := re.search(rf"│ {re.escape(k.label)} +│", text))}
    assert set(where) == {i.kind for i in plan.items}
    assert list(where.values()) == sorted(where.values())


def test_fits_exactly_when_the_headroom_is_not_negative(plan):
    assert plan.fits == (plan.headroom_bytes >= 0)
    assert plan.fits == (plan.verdict != NO_FIT)
    if plan.verdict == FITS:
        assert plan.offloaded_layers == 0
    if plan.unified:  # the host's pool also carries the GPU's share
        host = plan.devices[-1]
        assert host.shared_bytes == sum(u.used_bytes for u in plan.devices[:-1])


def test_layers_are_all_placed_once(plan):
    s, m = plan.settings, plan.model
    if not plan.machine.gpus:
        assert (s.n_gpu_layers, s.layer_split, plan.offloaded_layers) == (0, (), 0)
        return
    # llama.cpp's -ngl L holds the output layer and the last L - 1 repeating layers
    assert plan.offloaded_layers == m.n_layer - max(0, min(s.n_gpu_layers, m.n_layer + 1) - 1)
    if s.n_gpu_layers:
        assert sum(s.layer_split) == min(s.n_gpu_layers, m.n_layer + 1)


def test_weights_are_the_models_bytes(plan):
    """Every weight is placed once (in the plans of this sweep each device's tensors are contiguous in the
    file, so the host's mmapped span is its tensors); a tied model's output layer on a GPU loads token_embd
    again. The copies llama.cpp makes for its CPU kernels (CPU_REPACK, AMX) come on top."""
    weights = sum(i.bytes for i in plan.items if i.kind == LineKind.WEIGHTS)
    copies = sum(i.bytes for i in plan.items if i.kind in (LineKind.WEIGHTS_CPU_REPACK, LineKind.WEIGHTS_AMX))
    m, s = plan.model, plan.settings
    if s.backend == "torch":
        on_cpu = not plan.machine.gpus
        assert weights == sum(t.n_elements for t in m.tensors) * (4 if on_cpu else 2)
        return
    tensors = sum(t.n_bytes for t in m.tensors)
    tied = not any(t.name == "output.weight" for t in m.tensors)
    output_on_gpu = bool(plan.machine.gpus) and s.n_gpu_layers > 0
    embd = next(t.n_bytes for t in m.tensors if t.name == "token_embd.weight")
    dup = embd if tied and output_on_gpu else 0
    if not copies:
        assert weights == tensors + dup
    else:  # the mmapped span ends at the last tensor left in the file; the copies hold the rest
        assert weights <= tensors + dup <= weights + copies
    assert copies <= 1.05 * tensors  # AMX packs a few bytes more per block


def test_the_plan_is_its_backends_layout_of_the_chosen_settings(plan):
    """solve() prints what the backend's layout() gives for the settings it settled on."""
    lay = placer(plan.settings.backend).layout(plan.model, plan.draft, plan.machine, plan.settings)
    assert lay.items == plan.items
    assert lay.uses == plan.devices


# --- each backend's own rules ------------------------------------------------------------------


def test_exl2_fills_the_gpus_in_order_as_autosplit_does():
    """load_autosplit fills gpu0 before gpu1: a 70B at 4.0 bpw (35 GB) fits two 24 GB cards. The
    split used to be sized from a probe that put every layer on gpu0, which left gpu0 empty."""
    p = make_plan(PlanRequest(model="llama-3.1-70b-exl2-4.0", gpu="4090,3090", ram=64))
    assert p.verdict == FITS
    first, second = p.settings.layer_split
    assert first + second == p.model.n_layer + 1 and first > second > 0
    # gpu0 took all it could: one more layer (moved from gpu1) would overflow it
    more = p.settings.with_(layer_split=(first + 1, second - 1))
    assert 0 in placer("exl2").layout(p.model, p.draft, p.machine, more).over
    three = make_plan(PlanRequest(model="llama-3.1-405b-exl2-2.5", gpu="3090,3090,3090", ram=64, draft="none"))
    assert three.settings.layer_split[0] > 0 and sum(three.settings.layer_split) == three.model.n_layer + 1


@pytest.mark.parametrize("gpu", ["none", "m4-pro-48"])
def test_exl2_without_a_cuda_or_rocm_gpu_is_a_usage_error(gpu, capsys):
    """exllamav2 has CUDA and ROCm kernels only; the plan used to say an EXL2 model fits in RAM."""
    from homespec.cli import main
    from homespec.errors import UsageError

    with pytest.raises(UsageError, match="NVIDIA .CUDA. or AMD .ROCm. GPUs only"):
        make_plan(PlanRequest(model="mistral-7b-exl2-4.65", gpu=gpu, ram=None if gpu != "none" else 64))
    code = main(["plan", "--model", "mistral-7b-exl2-4.65", "--gpu", gpu])
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and err[0].startswith("error: the exl2 backend runs on") and err[1].startswith("hint: ")


def test_exl2_scratch_is_sized_for_the_chunk_it_runs():
    """load_autosplit caps max_input_len at the context: --ctx 1024 sizes scratch for 1024 tokens."""
    from homespec.plan import memory as mem

    p = make_plan(PlanRequest(model="mistral-7b-exl2-4.65", gpu="4090", ram=64, ctx=1024, draft="none"))
    (compute,) = [i for i in p.items if i.kind == LineKind.COMPUTE]
    assert compute.bytes == mem.exl2_scratch_bytes(p.model, 1024) < mem.exl2_scratch_bytes(p.model, 2048)
    assert compute.detail == "scratch for 1024 tokens"


def test_torch_on_the_cpu_budgets_fp32_activations():
    """The torch backend runs fp32 on the CPU: its weights, KV and activations are 4-byte."""
    from homespec.plan import memory as mem

    p = make_plan(PlanRequest(model=None, gpu="none", ram=16, backend="torch", draft="none"))
    (compute,) = [i for i in p.items if i.kind == LineKind.COMPUTE]
    tokens = max(p.settings.tree_tokens, min(p.settings.n_ubatch, p.settings.n_ctx))
    assert compute.bytes == mem.torch_compute_bytes(p.model, p.settings.with_(torch_dtype="f32"), tokens)
