"""Where each backend puts the model: one module per engine behind one interface.

    placer(settings.backend).place(model, draft, machine, settings) -> Placement
    placer(settings.backend).layout(model, draft, machine, settings) -> Layout

`place` is the backend's solver (the placement it settles on: layers on GPUs, the split between
them, what stays on the host); `layout` prices one fixed placement, item by item. The engines'
rules are in llamacpp.py, exl2.py and torch.py; what they share (the ledger of line items, layers
and KV per device, the draft's items, calibration, the per-device verdict) is in ledger.py, and
the bytes of each consumer in homespec.plan.memory. docs/planner.md gives the rules and formulas.
"""

from __future__ import annotations

from dataclasses import dataclass

from homespec.plan.place import exl2, llamacpp, torch
from homespec.plan.place.ledger import DeviceUse, Layout, LayoutFn, Placement, PlaceFn, device_uses

__all__ = ["DeviceUse", "Layout", "Placement", "Placer", "PLACERS", "device_uses", "placer"]


@dataclass(frozen=True, slots=True)
class Placer:
    layout: LayoutFn  # the line items of one fixed placement (settings.n_gpu_layers, layer_split)
    place: PlaceFn  # the placement this backend's solver settles on


PLACERS: dict[str, Placer] = {
    "llamacpp": Placer(llamacpp.layout, llamacpp.place),
    "exl2": Placer(exl2.layout, exl2.place),
    "torch": Placer(torch.layout, torch.place),
}


def placer(backend: str) -> Placer:
    """The backend's placement rules (the backend name is checked by plan.settings.check_settings)."""
    return PLACERS[backend]
