"""make_plan(): from command-line values to a solved Plan (what `homespec plan` prints and what
`homespec generate/chat/bench` start their backend with)."""

from __future__ import annotations

from homespec.errors import UsageError
from homespec.plan.fit import Plan, solve
from homespec.plan.settings import EXL2_CACHE, Settings
from homespec.specs import ModelSpec


def default_backend(model: ModelSpec) -> str:
    if model.format == "exl2" or (model.quant or "").upper().startswith("EXL2"):
        return "exl2"
    if model.format == "hf" and not model.quant:
        return "torch"
    return "llamacpp"


def make_plan(
    *,
    model: str | None,
    gpu: str = "auto",
    draft: str | None = None,
    quant: str | None = None,
    ctx: int = 8192,
    kv_type: str = "f16",
    flash_attn: bool = True,
    ubatch: int = 512,
    backend: str | None = None,
    draft_tokens: int = 60,
    draft_depth: int = 7,
    draft_topk: int = 10,
    ram: float | None = None,
    calibrate: str | None = None,
) -> Plan:
    from homespec.formats.resolve import resolve_draft, resolve_model
    from homespec.plan.machine import machine_from_args

    if model is None:
        from homespec.embedded import smollm2_path

        model = str(smollm2_path())
    target = resolve_model(model, quant)
    head = resolve_draft(draft, target)
    be = backend or default_backend(target)
    kv = kv_type.lower()
    if be == "exl2" and kv not in EXL2_CACHE:
        raise UsageError(f"exllamav2 has no '{kv_type}' cache", hint="use --kv-type f16, q8, q6 or q4")
    if be == "exl2" and target.format not in ("exl2", "catalogue", "hf"):
        raise UsageError(f"the exl2 backend cannot run a {target.format} file", hint="use --backend llamacpp for GGUF files")
    settings = Settings(
        backend=be, n_ctx=ctx, type_k=kv, type_v=kv, flash_attn=flash_attn, n_ubatch=ubatch,
        tree_tokens=draft_tokens, draft_depth=draft_depth, draft_topk=draft_topk,
    )
    machine = machine_from_args(gpu, ram)
    if calibrate is None:
        return solve(target, head, machine, settings)
    from dataclasses import replace

    from homespec.plan.calibrate import load_calibration

    cal = load_calibration(calibrate)
    if cal.tau is not None and head is not None:
        head = replace(head, expected_tau=cal.tau)
    plan = solve(target, head, machine, settings.with_(memory_scale=cal.memory_scale))
    e = plan.estimate
    est = replace(
        e,
        plain_tokens_per_s=e.plain_tokens_per_s * cal.speed_factor,
        spec_tokens_per_s=None if e.spec_tokens_per_s is None else e.spec_tokens_per_s * cal.speed_factor,
        basis=e.basis + f"; calibrated with {cal.source} (speed x{cal.speed_factor:.2f}, memory x{cal.memory_scale:.3f})",
    )
    return replace(plan, estimate=est, notes=(*plan.notes, f"calibrated with {cal.source}"))
