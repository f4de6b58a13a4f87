"""Session: one lane of the engine, for the commands that answer one prompt at a time.

    session = Session.open(RunOptions(...))            # plan, target, drafter, guard (engine.assemble)
    for r in session.stream(ids, sampler=..., limits=..., stop=...):
        ...                                            # StepFigures, TextDelta, ..., Finish

chat, generate and bench consume the same stream; it holds no terminal or rendering code. The
stream steps the engine on the caller's thread (Engine.step): the same step `homespec serve`
runs on its engine thread, with the same guard and the same prompt reuse (a chat's next turn
prefills only what it added to the conversation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from homespec.engine.api import EngineRequest
from homespec.engine.assemble import prepare
from homespec.engine.core import Engine, follow
from homespec.engine.options import RunOptions
from homespec.engine.responses import Response
from homespec.engine.setup import RunSetup, set_up
from homespec.errors import UsageError
from homespec.plan.lines import DRAFT_CONTEXT, TARGET_WEIGHTS, LineKind, sum_bytes
from homespec.speculative.steps import Limits

if TYPE_CHECKING:
    from homespec.contracts.backend import Backend
    from homespec.contracts.drafter import Drafter
    from homespec.speculative.guard import BatchGuard
    from homespec.plan.fit import Plan
    from homespec.speculative.sampling import Sampler


@dataclass
class Session:
    """A loaded target with one lane (and its drafter, and the guard over it) ready to answer."""

    engine: Engine
    options: RunOptions

    @classmethod
    def open(cls, opt: RunOptions, *, with_plan: bool = True, target: "Backend | None" = None) -> "Session":
        """Check the options and plan once (homespec.engine.setup.set_up), then Session.from_setup."""
        return cls.from_setup(set_up(opt, with_plan=with_plan), target=target)

    @classmethod
    def from_setup(cls, setup: RunSetup, *, target: "Backend | None" = None) -> "Session":
        """Load the target `setup` describes, then the drafter (an EAGLE drafter must exist before the
        prefill: it tells the target which layers' features to capture). `target`: a target already
        loaded for the same model to draft on (its owner closes it)."""
        if setup.parallel != 1:
            raise UsageError(f"a session is one lane, and this set-up has {setup.parallel}",
                             hint="set it up with parallel=1, or open an Engine")
        return cls(Engine(prepare(setup, target=target), queue_size=1), setup.options)

    # --- what the commands read ------------------------------------------------------------------

    @property
    def backend(self) -> "Backend":
        return self.engine.parts.backend  # type: ignore[return-value] - one lane: always a Backend

    @property
    def drafter(self) -> "Drafter | None":
        return self.engine.parts.drafters[0]

    @property
    def guard(self) -> "BatchGuard | None":
        """The guard over the drafter, kept for the session: what it learns carries over from one
        answer to the next."""
        return self.engine.guard

    @property
    def plan(self) -> "Plan | None":
        return self.engine.parts.plan

    @property
    def model_path(self) -> str:
        return self.engine.model_path

    def stream(self, prompt: Sequence[int], *, sampler: "Sampler | None" = None, limits: Limits = Limits(),
               stop: Sequence[str] = (), seed: int = 0, cache_prompt: bool = True) -> Iterator[Response]:
        """Answer `prompt` (token ids): StepFigures and TextDelta per step, then the Finish. The
        part of `prompt` the last answer left in the cache is not prefilled again (cache_prompt
        False: start from an empty cache). Stop strings end the answer before their first
        occurrence (finish "stop"). Closing the iterator early (Ctrl-C in chat) ends the answer
        between two steps."""
        handle = self.engine.submit(EngineRequest(tuple(int(t) for t in prompt), limits.max_tokens, sampler,
                                                  tuple(stop), seed, cache_prompt=cache_prompt))
        return follow(self.engine, handle)

    def close(self) -> None:
        self.engine.close()

    def memory(self) -> dict[str, Any]:
        """Measured (the engine's own report) beside planned bytes, for --json and chat."""
        rep = self.backend.memory_report()
        out: dict[str, Any] = {
            "measured": {"weights_bytes": rep.weights_bytes, "kv_bytes": rep.kv_bytes,
                         "compute_bytes": rep.compute_bytes, "total_bytes": rep.total_bytes, "device": rep.device},
        }
        net = getattr(self.drafter, "net", None)  # an EAGLE head in llama.cpp: its own buffers
        if net is not None:
            d = net.memory_report()
            out["measured"]["draft"] = {"weights_bytes": d.weights_bytes, "kv_bytes": d.kv_bytes,
                                        "compute_bytes": d.compute_bytes, "total_bytes": d.total_bytes}
            if getattr(net, "in_target_model", False):  # MTP layers: loaded into the target's model buffers
                m = out["measured"]
                m["weights_bytes"] -= d.weights_bytes
                m["total_bytes"] -= d.weights_bytes
        if self.plan is not None:
            items = self.plan.items

            def planned(*kinds: LineKind) -> int:
                return sum_bytes(items, kinds=kinds)

            out["planned"] = {
                "weights_bytes": planned(*TARGET_WEIGHTS),
                "kv_bytes": planned(LineKind.TARGET_KV),
                "compute_bytes": planned(LineKind.COMPUTE),
                "total_bytes": self.plan.total_bytes,
            }
            if net is not None:
                out["planned"]["draft"] = {
                    "weights_bytes": planned(LineKind.DRAFT_WEIGHTS), "kv_bytes": planned(LineKind.DRAFT_KV),
                    "compute_bytes": planned(LineKind.DRAFT_COMPUTE, LineKind.DRAFT_OUTPUT),
                    "total_bytes": planned(LineKind.DRAFT_WEIGHTS, *DRAFT_CONTEXT)}
        return out
