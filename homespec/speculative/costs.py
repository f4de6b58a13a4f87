"""What a speculative step costs on this machine, measured once when a session loads.

The guard (homespec.speculative.guard) compares speculation with plain decoding from measurements. Online
it can only learn speculation's cost by speculating, and on a machine where speculation cannot pay
(a CPU verifying a 5-node chain costs ~4 one-token steps, docs/backends.md) every such probe is a
loss the user pays. So at load the session runs the real generate loop over a short scratch
prompt, alternating plain and speculative steps, and keeps the fastest of each:

    plain_s     one plain step (verify of the root alone, commit)
    verify_s    verification of the drafter's tree (T nodes incl. the root)
    draft_s     one propose() of the drafter's shape

The guard scales the verify ratio (verify_s / plain_s) by the plain step it measures at the current
context and adds the draft time per level. Greedy, nothing is emitted; the
backend and the drafter are reset afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from homespec.backends.base import Backend
    from homespec.speculative.drafters.base import Drafter

SCRATCH = (
    "The workshop opens at eight. Tools go back on the wall before lunch, the floor is swept at four, "
    "and the last person out checks that the kiln is off and the windows are shut."
)


@dataclass(frozen=True, slots=True)
class StepCosts:
    plain_s: float  # one plain step (draft bookkeeping + verify + commit), seconds
    verify_s: float  # verifying the drafter's tree of `nodes` nodes, seconds
    draft_s: float  # one draft of `depth` levels, seconds
    nodes: int  # tree nodes verified, root included
    depth: int  # draft depth measured

    @property
    def verify_ratio(self) -> float:
        """Verifying the tree, in plain steps."""
        return self.verify_s / self.plain_s

    def verify_ratio_at(self, nodes: int) -> float:
        """The verify ratio for another tree size: linear in the nodes between 1 (a plain step,
        ratio 1) and the measured size (verification cost is close to a + b.T, docs/speculative.md)."""
        if self.nodes <= 1:
            return 1.0
        return 1.0 + (self.verify_ratio - 1.0) * (nodes - 1) / (self.nodes - 1)


def _tree_size(drafter: "Drafter") -> int:
    """Nodes of the drafter's largest tree, the root included."""
    return drafter.shape.total


class _Alternate:
    """A controller for the measurement: plain, speculative, plain, ..."""

    def __init__(self) -> None:
        self.n = 0

    def speculate(self) -> bool:
        self.n += 1
        return self.n % 2 == 0

    def record(self, step) -> None:
        pass


def measure_costs(backend: "Backend", drafter: "Drafter", *, repeats: int = 4) -> StepCosts:
    """Time plain and speculative steps on a scratch prompt (see the module docstring)."""
    from homespec.speculative.loop import Limits, decode

    tok = backend.tokenizer
    limits = Limits(max_tokens=4 * repeats + 4, stop_at_eos=False)
    # the scratch prompt, cut so that it, the steps' tokens and a whole tree fit the context
    room = backend.max_context - limits.max_tokens - _tree_size(drafter) - 1
    if room < 8:  # too small a context to measure in: neutral costs (the guard then probes)
        return StepCosts(1.0, 1.0, 0.0, 1, 1)
    prompt = tok.encode(SCRATCH, add_bos=True)[:room]
    plain, verify, draft, nodes = [], [], [], 0
    try:
        backend.reset()
        steps = decode(backend, drafter, prompt, limits=limits, controller=_Alternate())
        first_spec = True
        for i, st in enumerate(steps):
            if i == 0:  # the prefill
                continue
            if not st.speculative:
                plain.append(st.t_step)
            elif first_spec:  # the first draft also writes the prompt's entries: not a step's cost
                first_spec = False
            else:
                verify.append(st.t_verify)
                draft.append(st.t_draft)
                nodes = st.draft_size + 1
    finally:
        backend.reset()
        drafter.reset()
    if not plain or not verify:  # the answer ended first: neutral costs (the guard then probes)
        return StepCosts(1.0, 1.0, 0.0, 1, 1)
    return StepCosts(min(plain), min(verify), min(draft), nodes, drafter.shape.depth)
