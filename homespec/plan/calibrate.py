"""`homespec plan --calibrate FILE`: correct the estimates with what `homespec bench` measured here.

A bench JSON records, for the same model and machine, the plan's estimates beside measurements:
decode tokens/s of plain decoding, the engine's own memory report, and each method's tokens per
target pass. Calibration turns them into three factors applied to later plans on this machine:
  speed_factor  = measured plain tok/s / estimated plain tok/s   (scales both tok/s estimates)
  memory_scale  = max(1, measured bytes / planned bytes)          (a margin on every device's items)
  tau           = measured tokens per target pass of eagle3 (else another speculative method), over
                  its speculative steps (`spec_tau`): the guard's plain steps would dilute it toward 1;
                  a method that recorded `spec_tau` but never speculated gives none
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from homespec import userfiles
from homespec.errors import UsageError


@dataclass(frozen=True, slots=True)
class Calibration:
    speed_factor: float
    memory_scale: float
    tau: float | None
    source: str


def load_calibration(path: str) -> Calibration:
    """The factors a bench result gives (a UsageError for a file that is none, read or not)."""
    text = userfiles.read_text(path, "--calibrate", userfiles.CALIBRATION)  # a FIFO, a device: refused unread
    try:
        speed, scale, tau = _factors(json.loads(text))
    except (ValueError, KeyError, TypeError, AttributeError, ZeroDivisionError, RecursionError):
        raise UsageError(f"'{path}' is not a homespec bench result with a 'none' method",
                         hint="run `homespec bench --methods none,eagle3 --json-out FILE` first") from None
    if not 0.01 <= speed <= 100 or scale > 10:
        raise UsageError(f"'{path}' gives implausible factors (speed {speed:.3g}, memory {scale:.3g})",
                         hint="rerun `homespec bench` on this machine")
    return Calibration(speed, scale, tau, str(Path(path)))


def _factors(data: dict) -> tuple[float, float, float | None]:
    """(speed factor, memory scale, tau) of a bench result's JSON; a malformed one raises."""
    methods = data["methods"]
    none = methods["none"]
    est = (data.get("plan_estimate") or {}).get("plain_tokens_per_s")
    measured = none.get("tokens_per_s") or 0.0
    speed = float(measured / est if est and measured else 1.0)
    mem = none.get("memory") or {}
    planned = (mem.get("planned") or {}).get("total_bytes")
    actual = (mem.get("measured") or {}).get("total_bytes")
    scale = float(max(1.0, actual / planned) if planned and actual else 1.0)
    order = ["eagle3"] + [n for n in methods if n not in ("none", "eagle3")]  # the head's own figure first
    taus = [float(t) for t in (_tau(methods[n]) for n in order if n in methods) if t][:1]
    return speed, scale, taus[0] if taus else None


def _tau(method: dict) -> float | None:
    """Tokens per target pass over speculative steps; older bench files without `spec_tau` give
    `mean_accepted` (every step)."""
    if "spec_tau" in method:
        return method["spec_tau"] or None
    return method.get("mean_accepted") or None
