"""The torch EAGLE-3/3.1 drafter: the head run in torch (homespec.nets.eagle3_drafter) drafting
EAGLE-2's dynamic tree (homespec.speculative.tree) over the head's full log-prob rows.

What `--method eagle3` (or auto with a head) drafts with beside a torch or EXL2 target, and the
reference the llama.cpp head (homespec.speculative.drafters.eagle3) is tested against. Importing it
imports torch through homespec.nets: homespec.speculative.methods imports it lazily, for a torch-side
target alone (docs/architecture.md, "Where each part runs").
"""

from __future__ import annotations

import numpy as np

from homespec.contracts.tree import DraftTree
from homespec.nets.eagle3_drafter import Eagle3DrafterBase, Step
from homespec.speculative.tree import build_dynamic_tree


class Eagle3Drafter(Eagle3DrafterBase):
    """The torch head's drafter: every level's best `topk` expanded, the best `total` nodes kept."""

    def grow(self, step: Step, root: int, *, token_map: np.ndarray | None) -> DraftTree:
        return build_dynamic_tree(step, root, depth=self.depth, topk=self.topk, total=self.total, token_map=token_map)
