"""Several drafters behind one lane (`--method auto`): prompt lookup, the suffix store and, where
the target has one, the EAGLE head. Each step every part says what it offers, and the guard picks
one offer per lane (homespec.speculative.choice); every part follows every committed token, whoever
drafted it, so any of them can draft the next step.

Lookups (ngram, suffix) find their chains before the choice, from one search of this sequence's
context (homespec.speculative.matching, made once a step for both); the one model drafter (the EAGLE
head) drafts only when chosen, and owns the shape the guard sets (`shape`, `limits`,
`set_shape`, `propose` are its own). Without a model drafter, `propose` is the longest lookup.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from homespec.contracts.drafter import Drafter, DraftShape, Offer, ShapeLimits
from homespec.speculative.drafters.lookup import Lookup, with_root
from homespec.speculative.drafters.ngram import merge_paths
from homespec.speculative.matching import matches

if TYPE_CHECKING:
    from homespec.contracts.backend import Forward
    from homespec.contracts.tree import DraftTree


class AutoDrafter:
    name = "auto"

    def __init__(self, lookups: Sequence[Lookup], model: Drafter | None = None) -> None:
        if not lookups:
            raise ValueError("auto drafting needs at least one lookup")
        self.lookups, self.model = tuple(lookups), model
        self.parts: tuple[Drafter, ...] = (*self.lookups, *((model,) if model is not None else ()))

    @property
    def expected_acceptance(self) -> tuple[float, ...] | None:
        """The model drafter's recorded acceptance (the guard's prior for its drafts)."""
        return getattr(self.model, "expected_acceptance", None)

    @property
    def feature_layers(self) -> tuple[int, ...]:
        """The target layers the model drafter reads (none without one)."""
        return tuple(getattr(self.model, "feature_layers", ()))

    @property
    def reads_nextn(self) -> bool:
        """Whether the model drafter is the target's own MTP layers (they read its last hidden state)."""
        return bool(getattr(self.model, "reads_nextn", False))

    def begin(self, prompt: Sequence[int], forward: "Forward", *, kept: int = 0) -> None:
        for d in self.parts:
            d.begin(prompt, forward, kept=kept)

    def trim(self, keep: int) -> int:
        """What every part keeps: the least of what each could."""
        return min(d.trim(keep) for d in self.parts)  # lookups keep all: they hold no position

    @property
    def reaches(self) -> dict[str, int]:
        """Each lookup's source and longest chain (what the guard prices their chains up to)."""
        return {k: v for d in self.lookups for k, v in d.reaches.items()}

    def offers(self, root: int, context: Sequence[int], *, floor: int = 1) -> tuple[Offer, ...]:
        """Every part's offer, the lookups' from matches at least `floor` long (0: the guard found
        that no chain could pay this step; the model drafter's alone, without a search)."""
        model = (Offer(self.model.name),) if self.model is not None else ()
        if floor < 1:
            return model
        seq = with_root(context, root)
        found = matches(seq, floor=floor)  # the lookups' shared search (their default n-grams: 3 down to 1)
        out: tuple[Offer, ...] = ()
        for d in self.lookups:
            out += d.offer_in(seq, found, floor)
        return out + model

    def propose(self, root: int, context: Sequence[int]) -> "DraftTree":
        if self.model is not None:
            return self.model.propose(root, context)
        known = [o for o in self.offers(root, context) if o.known]
        best = max(known, key=lambda o: len(o.tokens), default=None)
        return merge_paths(int(root), [list(best.tokens)] if best is not None else [])

    def accept(self, tokens: Sequence[int], features: "np.ndarray | None", next_token: int) -> None:
        for d in self.parts:
            d.accept(tokens, features, next_token)

    def reset(self) -> None:
        for d in self.parts:
            d.reset()

    # --- the shape the guard may set: the model drafter's (else the first lookup's) -------------

    @property
    def _shaped(self) -> Drafter:
        return self.model if self.model is not None else self.lookups[0]

    @property
    def shape(self) -> DraftShape:
        return self._shaped.shape

    def limits(self) -> ShapeLimits:
        return self._shaped.limits()

    def set_shape(self, depth: int, total: int) -> DraftShape:
        return self._shaped.set_shape(depth, total)
