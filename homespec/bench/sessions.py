"""The sessions of a bench: one per method, drafting on one loaded target.

A bench compares methods on the same target, so it loads that target once: every method gets its
own drafter (and guard, made by the bench), and the methods take turns on the one backend, each
answer starting from an empty cache (Session.stream resets it). Switching methods also switches
the backend's feature capture to what the method's drafter reads (an EAGLE head: its three
layers; the model's MTP layers: its last hidden state; the others: none), so plain decoding is not
timed with a capture it does not use.

The target is loaded with the plan of the method that needs the most memory (mtp, which loads the
model's MTP layers, else one with a drafter model or head, else a drafting one: on a hybrid model
its load keeps the recurrent state's snapshots; else the first), so it leaves room for every method's
drafter; each session keeps its own method's plan for its memory report. `lockstep` runs the methods' answers interleaved, a
step of each in turn, which needs a cache per method: there every method loads its own target.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from homespec.engine.setup import RunSetup
from homespec.session import Session

if TYPE_CHECKING:
    from homespec.contracts.backend import Backend

# methods whose plan reserves memory for a drafter (auto: its head or MTP layers), the target's loader first
DRAFTING = ("mtp", "draft", "eagle3", "auto")


@dataclass
class MethodSessions:
    sessions: dict[str, Session]  # by method, in the bench's order
    shared: list["Backend"]  # the targets loaded here for several sessions, closed here once

    @property
    def targets(self) -> list["Backend"]:
        """The distinct loaded targets: one, unless every method needs its own (lockstep)."""
        return list({id(s.backend): s.backend for s in self.sessions.values()}.values())

    def use(self, method: str) -> Session:
        """The method's session, its target capturing what the method's drafter reads."""
        s = self.sessions[method]
        if getattr(s.drafter, "reads_nextn", False):
            s.backend.capture_nextn()
        else:
            s.backend.set_feature_layers(getattr(s.drafter, "feature_layers", ()))
        return s

    def close(self) -> None:
        for s in self.sessions.values():  # drafters' own models, and targets a session owns
            s.close()
        for t in self.shared:
            t.close()


def open_methods(setups: dict[str, RunSetup], *, shared: bool = True) -> MethodSessions:
    """A session per method, from its set-up (homespec.engine.setup); with `shared`, all on one loaded
    target (see the module docstring)."""
    methods = list(setups)
    opened = MethodSessions({}, [])
    try:
        if not shared:
            for m in methods:
                opened.sessions[m] = Session.from_setup(setups[m])
            return opened
        owner = min(methods, key=lambda m: (DRAFTING.index(m) if m in DRAFTING else len(DRAFTING) + (m == "none")))
        first = opened.sessions[owner] = Session.from_setup(setups[owner])
        first.owns_backend = False
        opened.shared.append(first.backend)
        for m in methods:
            if m != owner:
                opened.sessions[m] = Session.from_setup(setups[m], target=first.backend)
        opened.sessions = {m: opened.sessions[m] for m in methods}
        return opened
    except BaseException:
        opened.close()
        raise
