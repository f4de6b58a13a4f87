"""`homespec models`: every model file found on this machine, described from its GGUF header, and
optionally the plan's verdict for it on a given machine."""

from __future__ import annotations

from dataclasses import dataclass, replace

from homespec.errors import HomespecError
from homespec.formats.gguf import file_type_name, read_gguf_header
from homespec.plan.api import PlanRequest, make_plan
from homespec.plan.machine import machine_from_args
from homespec.sources.heads_here import list_heads as found_heads
from homespec.sources.stores import Found, find_all

VERDICT_WORDS = {"fits": "fits", "fits_offloaded": "fits with offload", "does_not_fit": "does not fit"}


@dataclass(frozen=True, slots=True)
class LocalModel:
    source: str  # ollama | lmstudio | hf-cache
    name: str  # pass it to --model
    path: str
    size_bytes: int
    arch: str | None
    quant: str | None
    verdict: str | None = None  # fits | fits_offloaded | does_not_fit (with --gpu)
    error: str | None = None  # why the header or the plan could not be read
    kind: str = "model"  # model | head (pass a head to --draft)
    pairs_with: str | None = None  # a head: the model(s) it drafts for


def _describe(found: Found) -> LocalModel:
    try:
        header = read_gguf_header(found.path)
    except HomespecError as e:
        return LocalModel(found.source, found.name, str(found.path), found.size, None, None, error=e.message)
    ftype = header.metadata.get("general.file_type")
    quant = file_type_name(ftype) if isinstance(ftype, int) else None
    return LocalModel(found.source, found.name, str(found.path), found.size, header.arch or None, quant)


def _verdict(model: LocalModel, gpu: str, ctx: int | None) -> LocalModel:
    if model.error or model.arch == "eagle3":
        return model
    try:  # planned from the file itself, as `homespec plan --model PATH` would
        plan = make_plan(PlanRequest(model=model.path, gpu=gpu, ctx=ctx))
    except HomespecError as e:
        return replace(model, error=e.message)
    return replace(model, verdict=plan.verdict)


def list_models(gpu: str | None = None, ctx: int | None = None) -> list[LocalModel]:
    """What Ollama, LM Studio and the hub cache hold; with `gpu`, each one's plan verdict there
    (`gpu` checked first, as `plan --gpu` checks it: a name the catalogue lacks is a usage error
    even when no model is found)."""
    if gpu is not None:
        machine_from_args(gpu)
    models = [_describe(f) for f in find_all()]
    if gpu is not None:
        models = [_verdict(m, gpu, ctx) for m in models]
    return models


def list_heads() -> list[LocalModel]:
    """The EAGLE heads in the hub cache and homespec's store, each with the model it drafts for."""
    return [LocalModel(h.source, h.name, str(h.path), h.size, "eagle3", h.layout, kind="head", pairs_with=h.pairs_with)
            for h in found_heads()]
