"""Where a sequence's newest tokens occurred before, and how long each earlier occurrence agrees
with them: the search prompt lookup and suffix drafting share (speculative/drafters/ngram.py,
suffix.py).

The newest n tokens (n = `max_ngram` down to `min_ngram`: the first n with an earlier occurrence
decides) are found among the earlier windows; each occurrence's match is then measured backwards,
token by token, up to `cap` tokens. The match length is what a lookup knows before it drafts, and
what the guard keys its acceptance statistics on: a 20-token match is a file being copied, a
1-token match a common word (homespec.speculative.choice).

Example: seq = 5 6 7 8 9 | 1 5 6 7 2 | 3 5 6 7 (indices 0-13). The newest 3-gram `5 6 7` occurs at
0-2 and 6-8; backwards, index 5 (`1`) and index -1 (none) do not agree with index 10 (`3`), so both
matches are 3 long, and the latest wins: Match(end=9, length=3), whose continuation is `2 3 5 ...`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_MATCH = 32  # a match is measured back at most this many tokens
RECENT = 64  # the latest occurrences of the newest n-gram that are measured


@dataclass(frozen=True, slots=True)
class Match:
    end: int  # index of the first token after the earlier occurrence (its continuation starts here)
    length: int  # tokens that agree with the sequence's newest ones, counted backwards (<= cap)


def matches(seq: np.ndarray, *, max_ngram: int = 3, min_ngram: int = 1, floor: int = 1, cap: int = MAX_MATCH,
            recent: int = RECENT) -> list[Match]:
    """Earlier occurrences of the newest tokens of `seq` [L], longest match first, latest first
    among equals, each matching at least `floor` tokens (a shorter n-gram than `floor` is not
    searched for). Each has at least one token after it (the newest n-gram itself is excluded)."""
    size = len(seq)
    starts, n = np.empty(0, dtype=np.int64), 0
    for n in range(min(max_ngram, size - 1), max(min_ngram, min(floor, max_ngram)) - 1, -1):
        # windows start at 0 .. L-1-n: compare them token by token with the newest n tokens
        hit = seq[:size - n] == seq[size - n]
        for k in range(1, n):
            hit &= seq[k:size - n + k] == seq[size - n + k]
        starts = np.flatnonzero(hit)
        if len(starts):
            break
    if not len(starts):
        return []
    starts = starts[-recent:]
    length = np.full(len(starts), n, dtype=np.int64)
    alive = np.ones(len(starts), dtype=bool)
    for k in range(n, min(cap, size - 1)):  # compare seq[start - 1 - (k - n)] with seq[L - 1 - k]
        before = starts - 1 - (k - n)
        alive &= (before >= 0) & (seq[np.maximum(before, 0)] == seq[size - 1 - k])
        if not alive.any():
            break
        length += alive
    ends = starts + n
    order = np.lexsort((-ends, -length))  # the last key sorts first: longest, then latest
    return [Match(int(ends[i]), int(length[i])) for i in order if length[i] >= floor]
