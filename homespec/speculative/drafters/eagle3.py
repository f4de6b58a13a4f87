"""EAGLE-3 / EAGLE-3.1 drafting with a head that runs where the target runs (a DraftNet,
homespec/contracts/head.py: in llama.cpp, homespec/backends/llamacpp/head.py).

The policy is homespec's, the arithmetic the network's:

* Committed entries are always computed from the TARGET's features, never kept from the head's own
  guesses (docs/architecture.md, contract 3): after a verification the accepted path's features wait
  here and are written when the next draft is proposed, together with everything the head missed.
  So while the guard keeps a lane plain the head does nothing on that lane's passes, and when drafting
  resumes it catches up in one batch (docs/speculative.md, "A sleeping head").
* A head with a window attends to the newest `window` entries and the first `sinks`
  (docs/speculative.md): entries it will never see again are dropped from its cache, and a catch-up
  writes only those it will see.
* The tree is EAGLE-2's dynamic tree (homespec/speculative/tree.py: grow_tree), level by level: the seed
  entry's output drafts the root's children, each later level decodes the expanded nodes. A network that
  grows the levels in one call on its side (DraftNet.grow: homespec's llama.cpp patch) hands back every
  candidate, and the drafter keeps the best (keep_best), as grow_tree would.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np

from homespec.contracts.drafter import MAX_DEPTH, DraftShape, Offer, ShapeLimits
from homespec.errors import HomespecError
from homespec.speculative.tree import grow_tree, keep_best

if TYPE_CHECKING:
    from homespec.contracts.backend import Forward
    from homespec.contracts.head import Candidates, DraftNet
    from homespec.contracts.tree import DraftTree


@dataclass(frozen=True, slots=True)
class _Seed:
    root: int
    out: "Candidates"  # the seed entry's row: the root's children and the row they consume


class HeadDrafter:
    name = "eagle3"

    def __init__(self, net: "DraftNet", *, depth: int = 6, topk: int = 8, total: int = 48, width: int,
                 window: int | None = None, source: str | None = None,
                 feature_layers: Sequence[int] = ()) -> None:
        """width: the target features' width (3 x the target's hidden size); window: override the
        head's own (0: attend to everything); feature_layers: the target layers whose inputs the
        head reads (what a target shared by several drafters is set to capture for this one)."""
        self.net, self.lane = net, net.new_lane()
        self.feature_layers = tuple(int(i) for i in feature_layers)
        self.depth, self.topk, self.total = depth, topk, total
        self.window = net.window if window is None else (window or None)
        self.sinks = net.sinks if self.window else 0
        self.width, self.source = width, source
        self.written = 0  # committed entries in the head's cache (positions 0 .. written-1)
        self._feats: list[np.ndarray] | None = None  # features of entries not yet written
        self._tokens: list[int] = []  # the token after each of them, but the last (the root completes it)
        self._seed: _Seed | None = None
        self.expected_acceptance: tuple[float, ...] | None = None  # the guard's prior (recorded acceptance)

    # --- Drafter protocol ---------------------------------------------------------------------

    def begin(self, prompt: Sequence[int], forward: "Forward", *, kept: int = 0) -> None:
        if kept == 0:
            self.reset()
        elif self.written != kept or self._feats is not None:
            raise HomespecError(f"the EAGLE-3 drafter holds {self.written} entries, the kept prefix is {kept}",
                                hint="call trim(kept) before begin(prompt, forward, kept=kept)")
        self._feats = [self._check(forward.features, len(prompt) - kept)]
        self._tokens = [int(t) for t in prompt[kept + 1:]]
        self._seed = None
        self._bound_waiting()

    def accept(self, tokens: Sequence[int], features: "np.ndarray | None", next_token: int) -> None:
        tokens = [int(t) for t in tokens]
        feats = self._check(features, len(tokens))
        if self._feats is not None:  # plain steps since the last draft: the root completes the last entry
            self._feats.append(feats)
            self._tokens.extend(tokens)
            self._bound_waiting()
            return
        if self._seed is None or tokens[0] != self._seed.root:
            raise HomespecError("the EAGLE-3 drafter was handed a path that does not start at its root",
                                hint="call begin() before accept()")
        self._feats, self._tokens, self._seed = [feats], tokens[1:], None

    def propose(self, root: int, context: Sequence[int]) -> "DraftTree":
        if self._feats is not None:
            drafted = self._catch_up(root, len(context))
            if drafted is not None:  # the network drafted the whole step in its one call
                return drafted
        if self._seed is None or self._seed.root != root or self.written != len(context):
            raise HomespecError(f"the EAGLE-3 drafter is out of step: it holds {self.written} committed positions, "
                                f"the context has {len(context)}",
                                hint="every committed token must reach the drafter through begin() or accept()")
        net, lane, seed, base = self.net, self.lane, self._seed, len(context) - 1
        grown = net.grow(lane, seed.out, base + 1, depth=self.depth, topk=self.topk)
        if grown is not None:  # the network grew the tree in one call: which candidates stay is ours
            return keep_best(root, grown.tokens, grown.logp, grown.score, grown.parent, self.total)
        rows: dict[str, np.ndarray] = {"hidden": seed.out.hidden}

        def expand(level: int, tokens: np.ndarray, parents: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            if level == 0:
                return seed.out.ids, seed.out.logp
            hidden = rows["hidden"][np.maximum(parents, 0)]  # [F, H] each node's parent's row
            out = net.level(lane, level, tokens.tolist(), hidden, parents.tolist(), base + level, self.topk)
            rows["hidden"] = out.hidden
            return out.ids, out.logp

        try:
            return grow_tree(expand, root, depth=self.depth, topk=self.topk, total=self.total)
        finally:
            net.end_tree(lane)  # the levels were speculative; the seed entry stays

    def offers(self, root: int, context: Sequence[int]) -> tuple[Offer, ...]:
        """A head drafts when chosen: what it offers is known only then."""
        return (Offer(self.name),)

    def trim(self, keep: int) -> int:
        """Keep entries 0 .. keep-1. Entries still waiting are written first where their next token
        is known; the newest committed token's entry waits for a root it never got. Entries a window
        dropped stay dropped: the head attends to the ones it still has until its window refills."""
        if self._feats is not None and keep > self.written:
            self._write_waiting(keep - self.written)
        keep = min(keep, self.written)
        self.net.trim(self.lane, keep)
        self.written = keep
        self._feats, self._tokens, self._seed = None, [], None
        return keep

    def reset(self) -> None:
        self.net.reset(self.lane)
        self.written = 0
        self._feats, self._tokens, self._seed = None, [], None

    def snapshot(self, keep: int) -> tuple[int, object]:
        """(entries kept, the head's state for them) for --cache-ram; trims as trim() does."""
        kept = self.trim(keep)
        return kept, self.net.save(self.lane)

    def restore(self, saved: object) -> int:
        kept, data = saved  # type: ignore[misc]
        if not self.net.load(self.lane, data):
            self.reset()
            return 0
        self.written = kept
        self._feats, self._tokens, self._seed = None, [], None
        return kept

    # --- the shape the guard may set (contracts/drafter.py) ----------------------------------

    @property
    def shape(self) -> DraftShape:
        return DraftShape(self.depth, self.topk, self.total)

    def limits(self) -> ShapeLimits:
        return ShapeLimits(max_depth=max(self.depth, MAX_DEPTH))

    def set_shape(self, depth: int, total: int) -> DraftShape:
        self.limits().check(depth, total)
        self.depth, self.total = depth, total
        return self.shape

    # --- writing committed entries -------------------------------------------------------------

    def _catch_up(self, root: int, committed: int) -> "DraftTree | None":
        """Write the waiting entries the head will attend to, then the seed (the newest committed
        token's entry, completed by `root`) whose output drafts this step. -> the step's tree where the
        network drafted it in the seed's call (DraftNet.draft), else None."""
        feats = self._feats[0] if len(self._feats) == 1 else np.concatenate(self._feats)  # [m, W]
        first = self.written  # position of feats[0]
        seed_pos = committed - 1
        if first + len(feats) != committed or len(self._tokens) != len(feats) - 1:
            raise HomespecError(f"the EAGLE-3 drafter has {len(feats)} waiting features from position {first}, "
                                f"the context has {committed} tokens", hint="a committed token was not accepted")
        lo = self._visible_from(seed_pos)  # entries below lo (but the sinks) are never attended again
        self.net.forget(self.lane, self.sinks, min(lo, seed_pos - 1))  # the entry before the seed stays: llama.cpp wants positions to follow on
        if max(first, lo) <= seed_pos:  # the sinks' entries still unwritten, then the window's up to the seed
            spans = [(first, min(seed_pos, self.sinks)), (max(first, lo), seed_pos + 1)]
        else:  # the seed lies among the sinks: every entry is seen
            spans = [(first, seed_pos + 1)]
        drafted = self._write_spans(feats, first, spans, root)
        self.written = committed
        self._feats, self._tokens = None, []
        return drafted

    def _write_waiting(self, n: int) -> None:
        """Write the first n waiting entries (at most those whose next token is known), as the window
        sees them: the next seed sits at position `end` or later, so entries below its window (but the
        sinks) are never attended again and are neither written nor kept. A prompt longer than the
        head's cache (a window's cells) fits, as in a catch-up."""
        feats = self._feats[0] if len(self._feats) == 1 else np.concatenate(self._feats)
        n = min(n, len(self._tokens))
        if n <= 0:
            return
        first, end = self.written, self.written + n
        lo = self._visible_from(end)
        self.net.forget(self.lane, self.sinks, min(lo, end - 1))
        self._write_spans(feats, first, [(first, min(end, self.sinks)), (max(first, lo), end)])
        self.written = end

    def _bound_waiting(self) -> None:
        """Keep no more waiting rows than a catch-up would write: a head with a window attends to
        the sinks and the newest `window` entries only, so once the waiting rows pass twice the
        window (a head asleep through a long answer, a long prompt) the sinks' entries are written
        and the rows the window has passed are dropped. A sleeping head's memory stays ~2 windows
        of feature rows (an 8B target: 48 KiB a row) whatever the context."""
        if self.window is None or len(self._tokens) + 1 <= 2 * self.window + self.sinks:
            return
        first = self.written  # the position of the first waiting row
        if self.written < self.sinks:
            self._write_waiting(self.sinks - self.written)  # positions written .. sinks-1, kept for good
        feats = np.concatenate(self._feats) if len(self._feats) > 1 else self._feats[0]
        cut = max(self.written, first + len(feats) - self.window) - first  # rows below the next seed's window
        self._feats, self._tokens = [feats[cut:]], self._tokens[cut:]
        self.written = first + cut

    def _write_spans(self, feats: np.ndarray, first: int, spans: list[tuple[int, int]],
                     root: int | None = None) -> "DraftTree | None":
        """Encode only the rows of `spans` and write their entries. With `root`, the last span ends
        with the seed (the newest committed token's entry, completed by the root), which goes to the
        network in one call with that span's other entries (_seed). -> the step's tree where that call
        drafted it."""
        spans = [(a, b) for a, b in spans if b > a]
        tokens = self._tokens if root is None else [*self._tokens, root]  # entry p's token: tokens[p - first]
        last = spans.pop() if root is not None else None
        if spans:
            rows = [p - first for a, b in spans for p in range(a, b)]
            g = self.net.encode(feats[np.array(rows, dtype=np.int64)])  # [n, H] only the rows the head will use
            i = 0
            for a, b in spans:
                self.net.write(self.lane, tokens[a - first:b - first], g[i:i + b - a], a)
                i += b - a
        if last is None or root is None:
            return None
        a, b = last
        if b != first + len(tokens):
            raise HomespecError(f"the EAGLE-3 drafter's last span ends at {b}, its seed sits at {first + len(tokens) - 1}",
                                hint="a bug in homespec: please report it")
        return self._seed_span(root, tokens[a - first:b - first], feats[a - first:b - first], a)

    def _seed_span(self, root: int, tokens: list[int], feats: np.ndarray, pos0: int) -> "DraftTree | None":
        """The entries at pos0 .. and the seed after them (the last): drafted in the network's one call
        where it can (the step's tree comes back with the seed's output), else encoded and seeded."""
        drafted = self.net.draft(self.lane, tokens, feats, pos0, depth=self.depth, topk=self.topk, total=self.total)
        if drafted is not None:
            tree, out = drafted
            self._seed = _Seed(root, out)
            return tree
        self._seed = _Seed(root, self.net.seed(self.lane, tokens, self.net.encode(feats), pos0, self.topk))
        return None

    def _visible_from(self, seed_pos: int) -> int:
        """The first position (past the sinks) the seed and the tree attend to."""
        return 0 if self.window is None else max(self.sinks, seed_pos + 1 - self.window)

    def _check(self, features: "np.ndarray | None", n: int) -> np.ndarray:
        if features is None or tuple(features.shape) != (n, self.width):
            got = None if features is None else tuple(features.shape)
            raise HomespecError(f"the EAGLE-3 drafter needs target features [{n}, {self.width}], got {got}",
                                hint="the backend must capture the layers set by set_feature_layers()")
        return np.asarray(features, dtype=np.float32)
