"""One lane over a single-sequence Backend: how torch, EXL2 and llama.cpp's one-sequence backend
run in the engine, which speaks the Lanes seam (contracts/backend.py).

The engine asks a target for one pass over every lane's work; a Backend holds one sequence, so
this adapter takes one item a pass: a PrefillWork is `backend.prefill`, a TreeWork
`backend.verify`, a commit `backend.commit`, and trimming a kept prefix `backend.trim` where the
backend has it (llama.cpp: it knows when a cache cannot be cut) else `backend.rollback`.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Sequence

from homespec.contracts.backend import Forward, PrefillWork, TreeWork
from homespec.errors import ContractError

if TYPE_CHECKING:
    from homespec.contracts.backend import Backend, MemoryReport, Tokenizer


class OneLane:
    """The Lanes seam over one Backend (lanes = 1)."""

    lanes = 1

    def __init__(self, backend: "Backend") -> None:
        self.backend = backend
        self.lane_ctx = backend.max_context
        self.max_context = backend.max_context
        # one sequence has the whole pass: its prompt goes in at once (the backend slices it)
        self.batch_rows = backend.max_context
        self.n_vocab = backend.n_vocab
        self.name, self.device = backend.name, backend.device
        self.model_path = backend.model_path
        # a backend that can hand a tree's logits out uncopied (llama.cpp's buffer): the step reads
        # them before the next pass, as the Lanes contract says
        self._view = "view" in inspect.signature(backend.verify).parameters

    @property
    def tokenizer(self) -> "Tokenizer":
        return self.backend.tokenizer

    # --- the shape drafters read (they draft on the target they were made with) ----------------

    @property
    def n_layer(self) -> int:
        return self.backend.n_layer

    @property
    def hidden_size(self) -> int:
        return self.backend.hidden_size

    def set_feature_layers(self, layers: Sequence[int]) -> None:
        self.backend.set_feature_layers(layers)

    # --- Lanes ----------------------------------------------------------------------------------

    def n_past(self, lane: int) -> int:
        self._check(lane)
        return self.backend.n_past

    def decode(self, work: Sequence[PrefillWork | TreeWork]) -> list[Forward]:
        if len(work) != 1:
            raise ContractError(f"one lane takes one item a pass, got {len(work)}",
                                hint="the engine gives each lane one item per step")
        item = work[0]
        self._check(item.lane)
        if isinstance(item, PrefillWork):
            return [self.backend.prefill(item.tokens)]
        if self._view:
            return [self.backend.verify(item.tokens, item.parents, view=True)]
        return [self.backend.verify(item.tokens, item.parents)]

    def commit(self, lane: int, path: Sequence[int]) -> None:
        self._check(lane)
        self.backend.commit(path)

    def trim(self, lane: int, keep: int) -> bool:
        self._check(lane)
        trim = getattr(self.backend, "trim", None)
        if trim is not None:
            return bool(trim(keep))
        n = self.backend.n_past - max(0, min(keep, self.backend.n_past))
        if n:
            self.backend.rollback(n)
        return True

    def free(self, lane: int) -> None:
        self._check(lane)
        self.backend.reset()

    # --- the state in bytes, where the backend has it (llama.cpp: backends/llamacpp/state.py) ----

    def checkpoint(self, lane: int) -> tuple[int, bytes] | None:
        self._check(lane)
        fn = getattr(self.backend, "checkpoint", None)
        return fn() if fn is not None else None

    def resume(self, lane: int, pos: int, data: bytes) -> bool:
        self._check(lane)
        fn = getattr(self.backend, "resume", None)
        return bool(fn(pos, data)) if fn is not None else False

    @property
    def can_save(self) -> bool:
        return hasattr(self.backend, "save_state")

    def save_state(self, lane: int) -> bytes:
        self._check(lane)
        return self.backend.save_state()

    def load_state(self, lane: int, data: bytes, n_past: int) -> bool:
        self._check(lane)
        return bool(self.backend.load_state(data, n_past))

    def memory_report(self) -> "MemoryReport":
        return self.backend.memory_report()

    def close(self) -> None:
        self.backend.close()

    def _check(self, lane: int) -> None:
        if lane != 0:
            raise ContractError(f"lane {lane} of a one-lane target", hint="use lane 0")
