"""What every lookup drafter (prompt lookup, the suffix store) shares: it finds its chain in text
already written, so it knows the chain, and the length of the match that found it, before the
guard chooses (homespec.speculative.choice).

The guard says before each step the shortest match worth offering (`floor`,
BatchGuard.match_floor): a chain from a shorter match could not pay at the costs measured and the
acceptance seen by match length, so the search stops short of it (0: no chain could pay, no search
at all). A lookup offers from one search of the context, its own or one made for several lookups
at once (`offer_in`; homespec.speculative.drafters.auto makes one search for both).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Sequence

import numpy as np

from homespec.contracts.drafter import Offer
from homespec.speculative.matching import Match, matches


def with_root(context: Sequence[int], root: int) -> np.ndarray:
    """`context + [root]` as the int64 array the search reads."""
    return np.fromiter((*context, int(root)), dtype=np.int64, count=len(context) + 1)


class Lookup(ABC):
    """The half of a lookup drafter the guard sees: its reach and its offers."""

    name: str
    num_draft: int  # the longest chain it offers
    max_ngram: int = 3  # the newest n-grams it searches for, longest first
    min_ngram: int = 1

    @property
    def reaches(self) -> dict[str, int]:
        """Its source and the longest chain it offers (what the guard prices a chain up to)."""
        return {self.name: self.num_draft}

    def offers(self, root: int, context: Sequence[int], *, floor: int = 1) -> tuple[Offer, ...]:
        """Its chain after `context + [root]` from a match at least `floor` tokens long (0: no
        search, nothing offered)."""
        if floor < 1:
            return ()
        seq = with_root(context, root)
        found = matches(seq, max_ngram=self.max_ngram, min_ngram=self.min_ngram, floor=floor)
        return self.offer_in(seq, found, floor)

    @abstractmethod
    def offer_in(self, seq: np.ndarray, found: list[Match], floor: int = 1) -> tuple[Offer, ...]:
        """The offer from a search already made over `seq` (context + root): `found`, best first,
        every match at least `floor` long."""
