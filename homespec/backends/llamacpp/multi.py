"""Several sequences in one llama.cpp context: one llama_decode per step carries every lane's work.

A *lane* is one request's sequence. Lane i owns the llama.cpp sequence ids
[i * L, (i + 1) * L): its committed tokens live in the first id (the lane's base), and a draft
tree verified for it uses the lane's other ids for its extra root-to-leaf paths, exactly as the
single-sequence backend (backends/llamacpp/backend.py) uses ids 0 .. L-1 with the layout of
backends/llamacpp/tree.py. Lanes never share an id, so llama.cpp's mask keeps them apart: a row
sees only cells carrying one of its own ids. The KV cache is unified (one buffer for every id).

Work for a step is a list of `PrefillWork` (prompt tokens appended to a lane; a long prompt
arrives in chunks, the logits of the last row only when asked) and `TreeWork` (a draft tree or a
lone root token, verified but not committed). `decode(work)` lays every item's rows into one
batch, runs it (in slices of n_batch rows if it is larger) and hands back one `Forward` per item;
`commit(lane, path)` then keeps a tree's accepted path as the lane's continuation and frees the
rest, `free(lane)` drops everything the lane holds (a finished or cancelled request).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

from homespec.backends.llamacpp import rollback, state
from homespec.backends.llamacpp.core import LlamaCppCore, Row, logit_index
from homespec.backends.llamacpp.tree import MAX_SEQ, TreeLayout, contiguous_prefix, path_seq, tree_layout
from homespec.backends.settings import BackendSettings, check_settings
from homespec.contracts.backend import Forward, PrefillWork, TreeWork, nothing_verified
from homespec.contracts.tree import check_path, check_tree
from homespec.errors import HomespecError, UsageError


@dataclass
class _Lane:
    n_past: int = 0
    pending: tuple[TreeLayout, list[int], list[int]] | None = None  # verified tree: layout, tokens, parents
    # the lane's ids every committed cell carries: base .. base+tagged-1 (kept while trees come, so a
    # tree step re-tags its own few cells, not the lane's context; LlamaCppBackend does the same)
    tagged: int = 1


class MultiSeqBackend(LlamaCppCore):
    """`lanes` sequences of at most `lane_ctx` tokens each (prompt, answer and a draft tree)."""

    _kv_full_hint = "code 1 means the KV cache is full: fewer --parallel slots or a larger --ctx"

    def __init__(self, model_path: str | os.PathLike[str], settings: BackendSettings, *, lanes: int,
                 lane_ctx: int, leaves_per_lane: int = 1) -> None:
        check_settings(settings)
        ids = lanes * leaves_per_lane
        if lanes < 1 or leaves_per_lane < 1 or ids > min(MAX_SEQ, settings.n_batch, settings.n_ctx):
            raise UsageError(
                f"{lanes} sequences of {leaves_per_lane} tree paths each need {ids} llama.cpp sequence ids; "
                f"this context holds at most {min(MAX_SEQ, settings.n_batch, settings.n_ctx)}",
                hint="lower --parallel, or draft a chain (--draft-topk 1) instead of a tree")
        self.lanes, self.leaves_per_lane, self.lane_ctx = lanes, leaves_per_lane, lane_ctx
        self._lane = [_Lane() for _ in range(lanes)]
        # Chains (one id per lane): a KV stream per lane, so a lane's cells stay in position order
        # whoever comes and goes, and a row scans only its own lane's cells. Trees share cells
        # between a lane's ids, which needs the one unified buffer.
        self.unified = leaves_per_lane > 1
        self._open(model_path, settings, n_seq=ids, seq_per_row=leaves_per_lane, unified=self.unified)
        # Flash attention sums a row's cells in cell order: keep a lane's committed cells in
        # position order (backends/llamacpp/tree.py, "cell order").
        self._keep_cell_order = self.flash_attn_active
        self.max_context = lane_ctx  # what one sequence may hold (the Backend protocol's name)
        self.order_repairs = 0

    def n_past(self, lane: int) -> int:
        return self._lane[lane].n_past

    # --- one step ------------------------------------------------------------------------------

    def decode(self, work: Sequence[PrefillWork | TreeWork]) -> list[Forward]:
        """Every item's rows in one batch. -> per item: logits [T, V] (a tree: one row per node in
        node order; a prefill: its last row, or none) and features [rows, k*H] or None.

        The logits every item hands out, and the features, are gathered out of llama.cpp's buffers
        in one copy each, already in item and node order; each item's share is a view of them.
        Logits already in that order (lanes' plain roots, chains) are not copied: they are read
        before the next decode (the Lanes contract)."""
        rows: list[Row] = []
        row_order: list[int] = []  # the batch row of each feature row handed out, item by item
        backs: list[Sequence[int] | None] = []  # per tree: node -> row within the item
        for item in work:
            first = len(rows)
            if isinstance(item, PrefillWork):
                rows.extend(self._prefill_rows(item))
                row_order.extend(range(first, len(rows)))
                backs.append(None)
            else:
                item_rows, back = self._tree_rows(item)
                rows.extend(item_rows)
                row_order.extend(first + r for r in back)
                backs.append(back)
        logit_order, spans = _logit_rows(work, backs, rows)
        logits, feats, _ = self._decode_rows(rows, logit_order=logit_order, row_order=row_order, view=True)
        out, at_row = [], 0
        for item, (lo, hi) in zip(work, spans):
            n = len(item.tokens)
            out.append(Forward(logits=logits[lo:hi], features=None if feats is None else feats[at_row:at_row + n]))
            at_row += n
            if isinstance(item, PrefillWork):
                self._lane[item.lane].n_past += n
        return out

    def _prefill_rows(self, item: PrefillWork) -> list[Row]:
        lane = self._lane[item.lane]
        if not item.tokens:
            raise HomespecError("prefill needs at least one token", hint="the prompt is empty")
        self._discard(item.lane)
        self._check_room(item.lane, len(item.tokens), "the prompt")
        ids, n = self._committed_ids(item.lane), len(item.tokens)
        return [(int(t), lane.n_past + i, ids, item.want_logits and i == n - 1) for i, t in enumerate(item.tokens)]

    def _tree_rows(self, item: TreeWork) -> tuple[list[Row], tuple[int, ...]]:
        tokens = [int(t) for t in item.tokens]
        parents = check_tree(tokens, list(item.parents))
        layout = tree_layout(parents, checked=True)
        rollback.check_chain(self, layout.n_seq)
        if layout.n_seq > self.leaves_per_lane:
            raise UsageError(f"the draft tree has {layout.n_seq} leaves; a sequence here verifies at most "
                             f"{self.leaves_per_lane}", hint="draft a narrower tree (fewer --draft-tokens)")
        self._discard(item.lane)
        self._check_room(item.lane, len(tokens), "the draft tree")
        lane, base = self._lane[item.lane], self._base(item.lane)
        rollback.before_verify(self, base, len(tokens))
        for j in range(lane.tagged, layout.n_seq):  # every path of the tree sees the lane's committed context
            self._ll.llama_memory_seq_cp(self._mem, base, base + j, -1, -1)
        lane.tagged = max(lane.tagged, layout.n_seq)
        lane.pending = (layout, tokens, parents)
        # a chain's rows (one path) carry every id the committed cells do: what it keeps needs no copy
        seq_ids = [tuple(base + s for s in ids) for ids in layout.seq_ids] if layout.n_seq > 1 \
            else [self._committed_ids(item.lane)] * len(tokens)
        rows = [(tokens[i], lane.n_past + layout.depths[i], seq_ids[i], True)
                for i in layout.order]  # depth first, so an accepted first-child path has adjacent cells
        return rows, layout.slot

    def commit(self, lane_id: int, path: Sequence[int]) -> None:
        """Keep `path` (root first) of the lane's verified tree as its continuation, free the rest."""
        lane = self._lane[lane_id]
        if lane.pending is None:
            raise nothing_verified()
        layout, tokens, parents = lane.pending
        path = check_path(path, parents, checked=True)
        if self.recurrent:  # a chain: its first len(path) tokens stay, the state gives the rest back
            rollback.keep(self, self._base(lane_id), lane.n_past, [tokens[i] for i in path], len(tokens))
            lane.pending = None
            lane.n_past += len(path)
            return
        k = contiguous_prefix(path, layout) if self._keep_cell_order else len(path)
        ll, mem, base, p0 = self._ll, self._mem, self._base(lane_id), lane.n_past
        ids = self._committed_ids(lane_id)
        if k < len(path) and self._keep_in_order(base + path_seq(path, layout), ids, p0, len(path),
                                                 range(base, base + layout.n_seq)):
            k = len(path)  # the nodes past the hole moved into it (backend.py)
        elif layout.n_seq > 1:  # the kept path joins every id; the other branches are freed
            self._keep_path(base + path_seq(path[:k], layout), ids, p0, k, tree=range(base, base + layout.n_seq),
                            below=[base + s for s in layout.seq_ids[path[k - 1]]], alone=False)
        elif k < len(tokens):  # a chain: its rows carry every id; all are cut after the kept nodes
            for s in ids:
                ll.llama_memory_seq_rm(mem, s, p0 + k, -1)
        if self.n_swa > 0 and not self.swa_full:  # a window's cells are reused only with one id (backend.py)
            self._untag(lane_id)
            ids = self._committed_ids(lane_id)
        lane.pending = None
        lane.n_past += k
        if k < len(path):  # nodes past a hole in cell order: decoded again behind the others
            rest = [tokens[i] for i in path[k:]]
            self._decode_rows([(t, lane.n_past + j, ids, False) for j, t in enumerate(rest)])
            lane.n_past += len(rest)
            self.order_repairs += 1

    def trim(self, lane_id: int, keep: int) -> bool:
        """Keep the lane's first `keep` committed tokens (a later request shares that prefix) and
        drop the rest. False where llama.cpp cannot cut there (a recurrent state, an SWA window
        moved past `keep`): the caller then resumes from a checkpoint, or frees the lane."""
        lane = self._lane[lane_id]
        self._discard(lane_id)
        keep = max(0, min(keep, lane.n_past))
        if keep == lane.n_past:
            return True  # nothing cut: the committed cells keep their ids for the next prompt's rows
        self._untag(lane_id)
        if not state.cut(self, self._base(lane_id), keep):
            return False
        lane.n_past = keep
        return True

    # --- a lane's state in bytes (prompt reuse; backends/llamacpp/state.py) ----------------------

    def checkpoint(self, lane_id: int) -> tuple[int, bytes] | None:
        """(position, partial state) to resume from later, where the memory cannot be cut anywhere."""
        if state.cut_anywhere(self):
            return None
        self._discard(lane_id)
        self._untag(lane_id)
        return self._lane[lane_id].n_past, state.read(self, self._base(lane_id), partial=True)

    def resume(self, lane_id: int, pos: int, data: bytes) -> bool:
        """Back to `pos` from checkpoint(): False (the lane empty) if llama.cpp refuses."""
        lane = self._lane[lane_id]
        self._discard(lane_id)
        self._untag(lane_id)
        ok = pos <= lane.n_past and state.resume(self, self._base(lane_id), pos, data)
        lane.n_past = pos if ok else 0
        return ok

    can_save = True

    def save_state(self, lane_id: int) -> bytes:
        """The lane's whole state (--cache-ram)."""
        self._discard(lane_id)
        self._untag(lane_id)
        return state.read(self, self._base(lane_id))

    def load_state(self, lane_id: int, data: bytes, n_past: int) -> bool:
        """Replace the lane's cache with a state save_state() returned for `n_past` tokens."""
        self.free(lane_id)
        if not state.write(self, self._base(lane_id), data):
            self.free(lane_id)
            return False
        self._lane[lane_id].n_past = n_past
        return True

    def free(self, lane_id: int) -> None:
        """Drop every cell the lane holds (its request finished or was cancelled)."""
        base = self._base(lane_id)
        for j in range(self.leaves_per_lane):
            self._ll.llama_memory_seq_rm(self._mem, base + j, -1, -1)
        self._snapshots.drop(base)
        self._lane[lane_id] = _Lane()

    def live_sequences(self) -> int:
        """Sequence ids holding at least one cell, asked of llama.cpp itself (0: nothing leaked)."""
        ll, mem = self._ll, self._mem
        return sum(ll.llama_memory_seq_pos_max(mem, s) >= 0 for s in range(self.lanes * self.leaves_per_lane))

    # --- internals -----------------------------------------------------------------------------

    def _committed_ids(self, lane_id: int) -> tuple[int, ...]:
        base = self._base(lane_id)
        return tuple(range(base, base + self._lane[lane_id].tagged))

    def _untag(self, lane_id: int) -> None:
        """The lane's committed cells back to its base id alone, before a cut or a state read or
        written by that id."""
        lane, base = self._lane[lane_id], self._base(lane_id)
        for j in range(1, lane.tagged):
            self._ll.llama_memory_seq_rm(self._mem, base + j, -1, -1)
        lane.tagged = 1

    def _base(self, lane: int) -> int:
        if not 0 <= lane < self.lanes:
            raise UsageError(f"lane {lane} is outside 0..{self.lanes - 1}")
        return lane * self.leaves_per_lane

    def _discard(self, lane_id: int) -> None:
        """A verified tree never committed: drop its cells."""
        lane = self._lane[lane_id]
        if lane.pending is not None and self.recurrent:
            lane.pending = None
            if not rollback.discard(self, self._base(lane_id), lane.n_past):
                lane.n_past = 0
                raise HomespecError(f"lane {lane_id}: a draft chain was verified and never committed, and the "
                                    "model's recurrent state cannot give all of it back: the lane was emptied",
                                    hint="commit() each verified tree")
        elif lane.pending is not None:  # the tree's cells, under whichever of the lane's ids, go
            base = self._base(lane_id)
            for j in range(self.leaves_per_lane):
                self._ll.llama_memory_seq_rm(self._mem, base + j, lane.n_past, -1)
            lane.pending = None

    def _check_room(self, lane_id: int, n_new: int, what: str) -> None:
        n_past = self._lane[lane_id].n_past
        if n_past + n_new > self.lane_ctx:
            raise HomespecError(
                f"context full: {n_past} tokens in the sequence + {n_new} for {what} > n_ctx {self.lane_ctx}",
                hint="start with a larger --ctx (see `homespec plan`) or a shorter prompt")

    # --- teardown ------------------------------------------------------------------------------

    def close(self) -> None:
        if getattr(self, "_tokenizer", None) is not None and hasattr(self._tokenizer, "close"):
            self._tokenizer.close()
            self._tokenizer = None
        super().close()


def _logit_rows(work: Sequence[PrefillWork | TreeWork], backs: Sequence[Sequence[int] | None],
                rows: Sequence[Row]) -> tuple[list[int], list[tuple[int, int]]]:
    """Which logits rows each item hands out, in one list (indices among the rows that ask for
    logits, which llama.cpp returns in row order) -> (that list, each item's span of it)."""
    out_index = logit_index(rows)
    order: list[int] = []
    spans: list[tuple[int, int]] = []
    first = 0
    for item, back in zip(work, backs):
        lo = len(order)
        if back is not None:  # a tree: every node's row, in node order
            order.extend(out_index[first + r] for r in back)
        elif item.want_logits:  # a prompt's last chunk: its last row
            order.append(out_index[first + len(item.tokens) - 1])
        spans.append((lo, len(order)))
        first += len(item.tokens)
    return order, spans
