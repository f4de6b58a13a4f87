"""make_plan(): from command-line values to a solved Plan (what `homespec plan` prints and what
`homespec generate/chat/bench` start their backend with)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from homespec.catalog import derived_draft, load_catalog
from homespec.embedded import shipped_head
from homespec.errors import UsageError
from homespec.hardware.isa import amx_choice, installed_variant
from homespec.plan.devices import AMD_GTT_HINT
from homespec.plan.fit import FITS, Plan, solve
from homespec.plan.lookups import WORKLOADS, workload_outlook
from homespec.plan.machine import machine_from_args
from homespec.plan.network import link_from_arg
from homespec.plan.parallel import fewest_pushed, most_sequences
from homespec.plan.render import gib
from homespec.plan.settings import DEFAULT_CTX, EXL2_CACHE, Settings, draft_shape
from homespec.plan.suggest import advise
from homespec.sources.resolve import resolve
from homespec.types import DraftSpec, Machine, ModelSpec

# The chain an MTP draft proposes per step when --draft-depth is not given (homespec's default): the
# layers are trained to predict one token ahead, so a long chain of them loses acceptance fast.
MTP_DEPTH = 3


def default_backend(model: ModelSpec) -> str:
    if model.format == "exl2" or (model.quant or "").upper().startswith("EXL2"):
        return "exl2"
    if model.format == "hf" and not model.quant:
        return "torch"
    return "llamacpp"


def _paired(model: str | None) -> tuple[str, str | None] | None:
    """The head a run pairs with a local model file or folder (homespec.sources.pairing), and a note
    when it is the catalogue's and not on this machine; None for a catalogue name or a hub URL."""
    from pathlib import Path

    if model is None or not Path(model).exists():
        return None
    from homespec.sources.pairing import pair  # startup: heads are paired for a model file only

    p = pair(model)
    if p.head is not None:
        return str(p.head), None
    if p.entry is not None:
        return p.entry, (f"draft: planned with {p.entry}, which is not on this machine: a run drafts with "
                         f"prompt lookups until `homespec pull {p.entry}` fetches it")
    return None


def default_draft(model: str, target: ModelSpec) -> tuple[str | None, str | None]:
    """The --draft a plan assumes when none is given, and a note saying what it assumed.

    The embedded model gets the head that ships with homespec (the one a run loads); a model the
    catalogue pairs with a head gets that head; anything else a trainable EAGLE-3.1 head shaped like
    one of its decoder layers, which no run can load until it is trained: the note says so."""
    head = shipped_head(model)
    if head is not None:
        return str(head), None
    paired = _paired(model)
    if paired is not None:
        return paired
    if load_catalog().paired_draft(target) is not None or target.n_layer < 4 or target.n_nextn_layer:
        return None, None
    d = derived_draft(target)
    return None, (f"draft: no trained head is known for {target.name}; planned with an assumed {d.kind} head "
                  f"shaped like one of its decoder layers (draft vocab {d.draft_vocab:,}): train one with "
                  "`homespec draft train`, or pass --draft DIR|none")


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanRequest:
    """What a plan is asked for: `homespec plan`'s options, and what a run plans its target with.

    Values left None take the defaults a run takes (homespec.plan.settings): --ctx DEFAULT_CTX, and the
    draft shape of the machine planned for (a chain on a CPU, a tree on a GPU). `max_parallel`: plan the
    most sequences of `ctx` tokens that fit instead of `parallel` (homespec.plan.parallel). `lanes_up_to`:
    choose the lanes as `homespec serve` does without --parallel, the most of N, N/2, ..., 1 whose plan
    fits as well as one's (homespec.plan.parallel.fewest_pushed). `remote`: other machines' GPUs
    (`3090@host2`) reached through llama.cpp's RPC backend over `link`. `cache_ram`: MiB of host RAM a
    server keeps for idle conversations (serve --cache-ram; llama.cpp only). `workload` (chat, code-edit):
    say which drafter is expected to pay on it (homespec.plan.lookups). `rollback`: the most draft tokens a
    verification gives back, for which a model with a recurrent state keeps copies of it (None: the chain
    planned's drafts, where a draft is; a run passes its own, lookups included), and `rollback_saves`
    whether longer chains are verified too (homespec.plan.settings.Settings)."""

    model: str | None = None  # None: the embedded model
    gpu: str = "auto"
    draft: str | None = None
    quant: str | None = None
    ctx: int | None = None  # tokens of KV per sequence
    kv_type: str = "f16"
    flash_attn: bool = True
    ubatch: int = 512
    backend: str | None = None
    draft_tokens: int | None = None
    draft_depth: int | None = None
    draft_topk: int | None = None
    ram: float | None = None  # GiB
    calibrate: str | None = None
    n_cpu_moe: int | None = None
    parallel: int = 1
    swa_full: bool = False
    max_parallel: bool = False
    lanes_up_to: int | None = None
    remote: tuple[str, ...] = ()
    link: str | None = None
    cache_ram: int = 0  # MiB
    workload: str | None = None
    draft_dtype: str = "q8_0"
    rollback: int | None = None
    rollback_saves: bool = True


def make_plan(req: PlanRequest) -> Plan:
    """The solved plan for `req`: what `homespec plan` prints and what a run starts its target with."""
    if req.workload is not None and req.workload not in WORKLOADS:
        raise UsageError(f"unknown workload '{req.workload}'", hint=f"use --workload {' or '.join(WORKLOADS)}")
    if req.max_parallel and req.parallel != 1:
        raise UsageError("--parallel and --max-parallel ask two things", hint="give one: --max-parallel finds N")
    if req.lanes_up_to is not None and (req.max_parallel or req.parallel != 1):
        raise UsageError("choosing the lanes and --parallel or --max-parallel ask two things",
                         hint="leave --parallel out to let the plan choose, or give it")
    named = resolve(req.model, "model", "plan", quant=req.quant)  # None: the embedded model
    model, target = named.spelling, named.spec
    draft, assumed = req.draft, None
    if draft is None or draft.strip().lower() == "auto":
        draft, assumed = default_draft(model, target)
    head = resolve(draft, "draft", "plan", target=target).spec
    be = req.backend or default_backend(target)
    _check_backend(be, req.kv_type.lower(), target)
    machine = _machine(machine_from_args(req.gpu, req.ram, tuple(req.remote)), be, req.remote, req.link)
    settings = _settings(req, be, target, head, machine)
    plan = _solve(target, head, machine, settings, req.calibrate)
    if req.max_parallel:
        plan = most_sequences(target, head, machine, plan).plan
    elif req.lanes_up_to is not None and req.lanes_up_to > 1:
        plan = fewest_pushed(plan, req.lanes_up_to,
                             lambda n: _solve(target, head, machine, settings.with_(n_seq=n), req.calibrate))
    notes = [n for n in (_unified_limit_note(plan), None if head is None else assumed) if n]
    plan = replace(plan, notes=(*_base_notes(req.gpu), *plan.notes, *notes))
    if req.workload is not None:
        plan = replace(plan, workload=req.workload,
                       outlook=workload_outlook(plan.estimate, head.kind if head is not None else None, req.workload))
    return plan


def _settings(req: PlanRequest, be: str, target: ModelSpec, head: DraftSpec | None, machine: Machine) -> Settings:
    """The settings solved for: the request's, with the draft shape filled in for this machine."""
    kv, draft_topk, draft_depth = req.kv_type.lower(), req.draft_topk, req.draft_depth
    if head is not None and head.kind == "mtp":
        # MTP layers draft a chain (llama.cpp draft-mtp): top-k 1, MTP_DEPTH tokens unless asked
        draft_topk, draft_depth = 1, MTP_DEPTH if draft_depth is None else draft_depth
    depth, topk, nodes = draft_shape(bool(machine.gpus), draft_depth, draft_topk, req.draft_tokens)
    if target.recurrent_layers and topk > 1:  # a recurrent state verifies chains (backends/llamacpp/rollback.py)
        topk, nodes = 1, depth + 1
    rollback = req.rollback
    if rollback is None:
        rollback = nodes - 1 if head is not None and target.recurrent_layers else 0
    return Settings(
        backend=be, n_ctx=DEFAULT_CTX if req.ctx is None else req.ctx, type_k=kv, type_v=kv,
        flash_attn=req.flash_attn, n_ubatch=req.ubatch, n_batch=max(512, req.ubatch), tree_tokens=nodes,
        draft_depth=depth, draft_topk=topk, n_seq=req.parallel, swa_full=req.swa_full, n_cpu_moe=req.n_cpu_moe,
        cpu_buffers=cpu_buffers_for(machine), cache_ram_bytes=req.cache_ram << 20 if be == "llamacpp" else 0,
        draft_dtype=req.draft_dtype, rollback=rollback if target.recurrent_layers else 0,
        rollback_saves=req.rollback_saves,
    )


def _base_notes(gpu: str | None) -> list[str]:
    """Which configuration a chip named without its memory size (`--gpu m3-ultra`) was planned as."""
    if not gpu or gpu.strip().lower() in ("auto", "none", "cpu"):
        return []

    cat = load_catalog()
    return [n for n in (cat.base_note(name) for name in gpu.split(",") if name.strip()) if n]


def _check_backend(be: str, kv: str, target: ModelSpec) -> None:
    """What the exl2 backend cannot do: a cache type exllamav2 lacks, a file it cannot run."""
    if be == "exl2" and kv not in EXL2_CACHE:
        raise UsageError(f"exllamav2 has no '{kv}' cache", hint="use --kv-type f16, q8, q6 or q4")
    if be == "exl2" and target.format not in ("exl2", "catalogue", "hf"):
        raise UsageError(f"the exl2 backend cannot run a {target.format} file", hint="use --backend llamacpp for GGUF files")


def _machine(machine: Machine, be: str, remote: tuple[str, ...], link: str | None) -> Machine:
    """The machine planned for, with the network to its --remote machines; both checked."""
    if link is not None:
        if not remote:
            raise UsageError("--link is the network to other machines, and no --remote names one",
                             hint="add --remote GPU@HOST, or drop --link")
        link_from_arg(link)  # checked here, once
        machine = replace(machine, link=link)
    if remote and be != "llamacpp":
        raise UsageError(f"the {be} backend runs on one machine", hint="plan several machines with --backend llamacpp")
    return machine


def cpu_buffers_for(machine: Machine) -> str:
    """How the llama.cpp that runs the plan loads weights in RAM (homespec.plan.cpu_buffers): with its
    extra buffer types unless HOMESPEC_LLAMA_AMX=off; AMX among them where the CPU has it and the build its
    kernels: a default (-march=native) build does, the one scripts/setup.sh installs where AMX crashes
    (variant `*-noamx`) does not. A crash of a build homespec did not make is found at load, not here."""
    choice = amx_choice()
    if choice == "off":
        return "none"
    if "AMX_INT8" not in machine.cpu_features or choice == "on":
        return "amx" if "AMX_INT8" in machine.cpu_features else "repack"
    if machine.source == "probe" and installed_variant()[0].endswith("-noamx"):
        return "repack"
    return "amx"


def _unified_limit_note(plan: Plan) -> str | None:
    """When a unified GPU's own limit (not the pool) keeps weights off it, name the setting that raises it."""
    gpu = next((u.device for u in plan.devices if u.device.is_gpu and u.device.unified), None)
    host = next((u.device for u in plan.devices if not u.device.is_gpu), None)
    if gpu is None or host is None or plan.verdict == FITS or gpu.capacity_bytes >= host.capacity_bytes:
        return None
    how = AMD_GTT_HINT if gpu.vendor == "amd" else "raise Metal's limit (sudo sysctl iogpu.wired_limit_mb=N)"
    return (f"the GPU may use {gib(gpu.capacity_bytes)} of the {gib(host.capacity_bytes)} pool ({gpu.limit}); "
            f"to keep more on it, {how}")


def _solve(target: ModelSpec, head: DraftSpec | None, machine: Machine, settings: Settings,
           calibrate: str | None) -> Plan:
    if calibrate is None:
        return advise(solve(target, head, machine, settings))
    from homespec.plan.calibrate import load_calibration  # startup: only with --calibrate

    cal = load_calibration(calibrate)
    if cal.tau is not None and head is not None:
        head = replace(head, expected_tau=cal.tau)
    plan = advise(solve(target, head, machine, settings.with_(memory_scale=cal.memory_scale, speed_scale=cal.speed_factor)))
    e = plan.estimate
    est = replace(e, basis=e.basis + f"; calibrated with {cal.source} (speed x{cal.speed_factor:.2f}, "
                                     f"memory x{cal.memory_scale:.3f})")
    return replace(plan, estimate=est, notes=(*plan.notes, f"calibrated with {cal.source}"))
