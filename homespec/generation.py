"""Older names for whole answers over Session.stream, still imported by homespec.bench."""

from __future__ import annotations

from typing import Sequence

from homespec.session.core import Session
from homespec.session.lockstep import lockstep
from homespec.session.responses import Finish, final
from homespec.speculative.loop import Limits


def run(session: Session, prompt: list[int], *, sampler=None, limits: Limits = Limits(), seed: int = 0,
        controller=None) -> Finish:
    """The whole answer; the guard is the session's own (`controller` can only be that one)."""
    assert controller is None or controller is session.guard, "a session answers under its own guard"
    return final(session.stream(prompt, sampler=sampler, limits=limits, seed=seed))


def run_lockstep(runs: Sequence[tuple[Session, object]], prompt: list[int], *, sampler=None,
                 limits: Limits = Limits(), seed: int = 0) -> list[Finish]:
    for session, controller in runs:
        assert controller is None or controller is session.guard, "a session answers under its own guard"
    return lockstep([s.stream(prompt, sampler=sampler, limits=limits, seed=seed) for s, _ in runs])
