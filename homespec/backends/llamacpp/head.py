"""An EAGLE-3 / 3.1 head run by llama.cpp beside its target: the draft runs where the target runs.

The head is an `eagle3` GGUF (homespec/heads/ converts every head homespec loads to one) loaded as a
second llama.cpp model, with a context of its own on the target's device. That context's `ctx_other`
is the target's, so the head's graph takes the target's token embeddings (and output projection, for
a head that ships none) from the target's weights in place, as llama.cpp's own drafter does
(vendor/llama.cpp/common/speculative.cpp, `draft-eagle3`). Two graphs (src/models/eagle3.cpp):

* the **encoder** turns rows of the target's three layer inputs into the head's `g` rows:
  `g = fc(features)` [n, 3*H_t] -> [n, H] (with EAGLE-3.1's fc_norm first, on a patched build);
* the **decoder** runs the head's one layer on (token at P+1, g at P) at position P and gives logits
  over the target's vocabulary (-inf outside the head's draft vocabulary) and the row the next draft
  step consumes (`nextn`: the pre-norm output, or the normed one with EAGLE-3.1's norm_output).

Sequence ids. One context serves every lane of the engine; lane i owns the ids `[1 + i*S, 1 + (i+1)*S)`
(id 0 is the encoder's scratch):

* `base`: the lane's committed entries. Entry j pairs the target feature at j with the token at j+1
  and sits at position j; the entry of the newest committed token waits for the next root (the seed);
* `write`: an always-empty id under which committed entries that do not follow on from the lane's
  last one are written and then copied into the others (llama.cpp wants a sequence's new positions to
  follow its last one, and a windowed head skips the entries its window no longer sees); entries that
  follow on are decoded under every committed id at once;
* two sets of `topk` ids, alternating by tree level: a node drafted at level d gets the id of its
  slot in set d % 2. Every committed entry carries every tree id as well as `base` (written so, and
  dropped from all of them alike), so a node needs only its ancestors' cells added to its id: a copy
  of its parent's id from the tree's first position on (llama_memory_seq_cp over a position range
  touches only the tree's few cells). It attends to exactly the committed entries and its own
  ancestors; the previous level's ids lose their tree cells after each level and the last level's
  when the tree is done, which frees the tree's cells. (Copying the parent's whole sequence instead
  re-tagged every committed entry for every node: ~40% of the host time of a 48-node tree with a
  window of 1,024, and growing with the window.)

Upstream llama.cpp's eagle3 decoder does not prune its rows to the ones asked for, and with embeddings on (the
device top-k's channel) llama.cpp makes every row of a call an output; homespec's patch does both (ROWS_ASKED), so
the committed entries a step writes and its seed share one call, in which the seed's row alone is an output
(`seed`), and a write computes no output rows at all.

Imported lazily with the llama.cpp backend; no torch here.
"""

from __future__ import annotations

import ctypes
import os
import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from homespec.backends.llamacpp import exports
from homespec.backends.llamacpp.amx import model_params
from homespec.backends.llamacpp.batch import Batch
from homespec.backends.llamacpp.head_tree import NativeTree, draft_entry_point, grow_entry_point
from homespec.backends.llamacpp.lib import (
    HostRows,
    LogCollector,
    address_getter,
    capture_log,
    import_llama_cpp,
    memory_report,
    nextn_getter,
    reason,
)
from homespec.backends.llamacpp.threads import ThreadTuner
from homespec.contracts.backend import MemoryReport
from homespec.contracts.head import Candidates, Grown
from homespec.contracts.tree import DraftTree
from homespec.errors import FormatError, HomespecError
from homespec.formats.gguf import read_gguf_header

_TARGET_LAYER_IDS = "_Z28llama_model_target_layer_idsPK11llama_model"
_TARGET_LAYER_IDS_N = "_Z30llama_model_target_layer_ids_nPK11llama_model"
_ALL_LAYERS = 2**31 - 1
HEAD_UBATCH = 64  # rows per head call (see _context)


@dataclass(frozen=True, slots=True)
class HeadFile:
    """What homespec reads from an eagle3 GGUF's header before loading it."""

    path: str
    layers: tuple[int, ...]  # the target layers whose inputs the head reads
    target_hidden: int
    window: int | None  # homespec.draft_window: attend to the newest entries only (None: all)
    sinks: int  # with a window, the first entries that stay visible
    draft_vocab: np.ndarray  # [V_draft] int64 target ids the head can draft (d2t), or all ids


DEFAULT_SINKS = 4  # entries at the start a windowed head keeps seeing (StreamingLLM's attention sinks)


def read_head_file(path: str | os.PathLike[str], n_vocab: int) -> HeadFile:
    """An eagle3 GGUF's header and its d2t table (mapped from the file, nothing else read).
    `n_vocab`: the target's vocabulary, which the head's ids must fall in."""
    p = os.fspath(path)
    h = read_gguf_header(p)
    meta = h.metadata
    if meta.get("general.architecture") != "eagle3":
        raise FormatError(f"{p} is a {meta.get('general.architecture')!r} GGUF, not an eagle3 draft head",
                          hint="pass an EAGLE-3 head (a directory, or an eagle3 .gguf)")
    layers = meta.get("eagle3.target_layers")
    hidden = meta.get("eagle3.target_hidden_size")
    if not isinstance(layers, list) or len(layers) != 3 or hidden is None:
        raise FormatError(f"{p}: no eagle3.target_layers (three ids) or eagle3.target_hidden_size",
                          hint="re-export the head with homespec draft export")
    window = meta.get("homespec.draft_window")
    sinks = int(meta.get("homespec.draft_sinks", DEFAULT_SINKS)) if window else 0
    vocab = np.arange(n_vocab, dtype=np.int64)
    offset = h.data_offset
    for t in h.tensors:
        if t.name == "d2t":
            vocab = np.array(np.memmap(p, dtype=np.int64, mode="r", offset=offset, shape=(t.n_bytes // 8,)))
            break
        offset += -(-t.n_bytes // h.alignment) * h.alignment
    if vocab.size == 0 or vocab.min() < 0 or vocab.max() >= n_vocab:
        raise FormatError(f"{p}: its d2t table names ids outside the target's {n_vocab}-token vocabulary",
                          hint="this head was made for another target")
    return HeadFile(p, tuple(int(i) for i in layers), int(hidden), int(window) if window else None, sinks, vocab)


@dataclass(frozen=True, slots=True)
class _LaneIds:
    base: int
    write: int
    sets: tuple[tuple[int, ...], tuple[int, ...]]

    @property
    def tree(self) -> tuple[int, ...]:
        """Every tree id: each committed entry carries them all beside `base`."""
        return self.sets[0] + self.sets[1]

    @property
    def committed(self) -> tuple[int, ...]:
        """The ids every committed entry carries."""
        return (self.base, *self.tree)


class LlamaCppHead:
    """An eagle3 GGUF in a llama.cpp context beside `target` (a loaded llama.cpp backend): the
    DraftNet of homespec/contracts/head.py."""

    def __init__(self, info: HeadFile, target: Any, *, lanes: int, cells_per_lane: int, topk: int,
                 n_threads: int | None = None, device_topk: bool = True) -> None:
        """device_topk: let the device pick each node's children where the build can (False: the host,
        from the logits; the test of the device's choice compares the two)."""
        self._ll = ll = import_llama_cpp()
        from llama_cpp import llama_cpp_ext

        self._ext = llama_cpp_ext
        self.info, self.topk, self.lanes = info, topk, lanes
        self.window, self.sinks = info.window, info.sinks
        self._next_lane = 0
        self._tree_from: dict[int, int] = {}  # lane -> the position of its tree's first level, while one is drafted
        self.n_vocab = target.n_vocab
        self._log = LogCollector()
        self._model = self._ctx = None
        self._enc: Batch | None = None  # made at the first encode, as wide as the features
        per_lane = 2 + 2 * topk
        self._ids = [_LaneIds(1 + i * per_lane, 2 + i * per_lane,
                              (tuple(range(3 + i * per_lane, 3 + i * per_lane + topk)),
                               tuple(range(3 + i * per_lane + topk, 3 + i * per_lane + 2 * topk))))
                     for i in range(lanes)]
        n_seq = 1 + lanes * per_lane
        if n_seq > 256:
            raise HomespecError(f"{lanes} lanes drafting {topk}-wide trees need {n_seq} llama.cpp sequence ids; "
                                "llama.cpp holds 256", hint="lower --parallel or --draft-topk")
        with capture_log(self._log, load=True):
            self._model = self._load(info.path, target)
            self._check_layers()
            self.n_embd = ll.llama_model_n_embd(self._model)
            self.device_topk = device_topk and self._ask_for_topk(topk)
            self._rows_pruned = self._prunes_rows()
            # llama.cpp aborts with fewer cells than sequences (it reserves an output row for each)
            self._ctx = self._context(target, n_ctx=max(lanes * cells_per_lane, n_seq), n_seq=n_seq,
                                      n_threads=n_threads)
        self._mem = ll.llama_get_memory(self._ctx)
        self._threads_now = int(ll.llama_n_threads(self._ctx))
        self._threads = ThreadTuner(self._threads_now, fixed=not target.settings.adapt_threads)
        self._ext.llama_set_embeddings_nextn(self._ctx, True, True)  # masked: the rows asked for
        self._batch_cap = ll.llama_n_batch(self._ctx)
        self._enc_cap = ll.llama_n_ubatch(self._ctx)  # the encoder's batch must fit one micro-batch
        # one numpy-backed batch for every decoder call (a row: a token, its g row, the ids it joins)
        self._dec = Batch(ll, self._batch_cap, len(self._ids[0].committed), embd=self._row_width())
        self._nextn_rows, self._embd_rows = HostRows(self.n_embd), HostRows(self.n_embd)  # views made once per buffer
        self._logit_rows = HostRows(self.n_vocab)
        self._logits_at = address_getter(exports.llama_library(), "llama_get_logits")
        self._embd_at = address_getter(exports.llama_library(), "llama_get_embeddings")
        self._nextn_at = nextn_getter()
        self._full_vocab = len(info.draft_vocab) == self.n_vocab
        self._row_ids = np.arange(self._batch_cap)[:, None]
        self.native_tree = self._native_tree()  # None: the tree grows level by level from Python

    def _native_tree(self) -> NativeTree | None:
        """The tree's levels in one call where the build has homespec's patch and the device picks the
        children (backends/llamacpp/head_tree.py)."""
        fn = grow_entry_point() if self.device_topk else None
        if fn is None:
            return None
        vocab = None if self._full_vocab else self.info.draft_vocab
        return NativeTree(fn, self._ctx, self.topk, [ids.sets for ids in self._ids], vocab,
                          len(self.info.draft_vocab), self._log, draft_fn=draft_entry_point(),
                          committed=[ids.committed for ids in self._ids], n_embd=self.n_embd)

    # --- loading -------------------------------------------------------------------------------

    def _load(self, path: str, target: Any) -> Any:
        ll = self._ll
        mp = model_params(ll)
        # all of the head's one layer where the target computes: on the GPU when any of the
        # target's layers are there, else on the CPU
        mp.n_gpu_layers = _ALL_LAYERS if target.settings.n_gpu_layers != 0 else 0
        model = ll.llama_model_load_from_file(path.encode(), mp)
        if not model:
            raise FormatError(f"llama.cpp could not load the head {path}: {reason(self._log, 'unknown reason')}",
                              hint="pass an eagle3 GGUF (homespec draft export writes one)")
        return model

    def _check_layers(self) -> None:
        lib = self._ll.llama_cpp._lib
        ids_fn, n_fn = getattr(lib, _TARGET_LAYER_IDS), getattr(lib, _TARGET_LAYER_IDS_N)
        ids_fn.argtypes = n_fn.argtypes = [ctypes.c_void_p]
        ids_fn.restype, n_fn.restype = ctypes.POINTER(ctypes.c_int32), ctypes.c_uint32
        n = n_fn(self._model)
        got = tuple(int(ids_fn(self._model)[i]) for i in range(n))
        if got != self.info.layers:
            raise FormatError(f"{self.info.path}: llama.cpp reads target layers {got}, its header says {self.info.layers}",
                              hint="re-export the head with homespec draft export")

    def _row_width(self) -> int:
        """The width of the decoder's input rows, as llama.cpp reads them from a batch (it copies
        that many floats a row, unchecked): the head's g rows, n_embd wide."""
        width = int(self._ll.llama_model_n_embd_inp(self._model))
        if width != self.n_embd:
            raise FormatError(f"{self.info.path}: llama.cpp reads {width}-wide input rows, the head writes {self.n_embd}",
                              hint="re-export the head with homespec draft export")
        return width

    def _ask_for_topk(self, k: int) -> bool:
        """Where the build has homespec's patch (DRAFT_TREES), the head's graph picks each output row's k
        best children on the device and hands back 2k numbers a row instead of a vocabulary-wide row of
        logits (a 128k vocabulary: 512 KiB a row, and a sort's worth of host work). Else the host picks."""
        setter = exports.entry_point(exports.TOPK_SYMBOL)
        wanted = exports.DRAFT_TREES | exports.ROWS_ASKED
        if setter is None or exports.eagle3_features() & wanted != wanted or 2 * k > self.n_embd:
            return False
        setter.argtypes, setter.restype = [ctypes.c_void_p, ctypes.c_int32], None
        setter(self._model, k)
        return True

    def _prunes_rows(self) -> bool:
        """Does the graph keep only the output rows before its output and next rows (homespec's patch to the
        eagle3 decoder)? Then a call's outputs are the rows asked for, wherever they sit; else llama.cpp hands
        back the first rows, and a seed shares no call with the entries before it."""
        return bool(exports.eagle3_features() & exports.DRAFT_TREES)

    def _context(self, target: Any, *, n_ctx: int, n_seq: int, n_threads: int | None) -> Any:
        ll = self._ll
        cp = ll.llama_context_default_params()
        cp.n_ctx = n_ctx
        # Few rows per call: a tree level has at most topk, and the graph computes logits over the
        # whole target vocabulary for every row, so the compute buffer grows with n_ubatch x n_vocab;
        # committed entries are written in chunks of this size. llama.cpp reserves an output row per
        # sequence and aborts when n_batch is smaller than n_seq_max.
        cp.n_batch = cp.n_ubatch = min(max(HEAD_UBATCH, n_seq), n_ctx)
        cp.n_seq_max = n_seq
        cp.kv_unified = True  # one cell carries every tree path through it
        threads = n_threads or target.settings.n_threads or os.cpu_count() or 1
        cp.n_threads = cp.n_threads_batch = threads
        cp.embeddings = self.device_topk  # the channel the device's top-k comes back through
        cp.no_perf = True
        cp.ctx_other = target._ctx  # the target's embeddings (and output layer when the head has none)
        ctx = ll.llama_init_from_model(self._model, cp)
        if not ctx:
            raise HomespecError(f"llama.cpp could not create the head's context: {reason(self._log, 'unknown reason')}",
                                hint="a smaller --ctx or fewer --parallel lanes need less memory")
        return ctx

    def new_lane(self) -> int:
        if self._next_lane >= self.lanes:
            raise HomespecError(f"the draft head was opened for {self.lanes} lanes", hint="open it with more lanes")
        self._next_lane += 1
        return self._next_lane - 1

    # --- the encoder ---------------------------------------------------------------------------

    def encode(self, features: np.ndarray) -> np.ndarray:
        """[n, 3*H_t] target features -> [n, H] the head's g rows (a copy: the buffer is reused)."""
        n, width = features.shape
        if width != 3 * self.info.target_hidden:  # llama.cpp reads rows of its n_embd_inp_enc, unchecked
            raise HomespecError(f"the head's encoder takes rows of {3 * self.info.target_hidden} floats, got {width}",
                                hint="the target's three feature layers feed it (set_feature_layers)")
        if self._enc is None or self._enc.embd.shape[1] != width:
            self._enc = Batch(self._ll, self._enc_cap, 1, embd=width, tokens=False)  # rows only, no tokens
        out = np.empty((n, self.n_embd), dtype=np.float32)
        for lo in range(0, n, self._enc_cap):
            hi = min(n, lo + self._enc_cap)
            # the encoder uses no positions; scratch id 0 stays empty, so any consecutive run does
            self._enc.put(hi - lo, pos=np.arange(hi - lo), seq=(0,), want=True, embd=features[lo:hi])
            self._process(self._enc, hi - lo, encode=True)
            out[lo:hi] = self._nextn_rows.rows_at(self._nextn_at(self._ctx), hi - lo)
        return out

    # --- committed entries ----------------------------------------------------------------------

    def write(self, lane: int, tokens: Sequence[int], g: np.ndarray, pos0: int) -> None:
        """Committed entries (tokens[i], g[i]) at positions pos0 + i into the lane's base sequence,
        without outputs: their keys and values are all the head keeps of them."""
        self._entries(lane, tokens, g, pos0, last_out=False)

    def _entries(self, lane: int, tokens: Sequence[int], g: np.ndarray, pos0: int, *, last_out: bool) -> None:
        """Entries (tokens[i], g[i]) at positions pos0 + i into every committed id of the lane, in calls of
        at most a batch; `last_out`: the last row is an output (the seed's)."""
        n = len(tokens)
        if not n:
            return
        ids = self._ids[lane]
        follows = self._follows(ids, pos0)
        seq = ids.committed if follows else (ids.write,)
        for lo in range(0, n, self._batch_cap):
            hi = min(n, lo + self._batch_cap)
            self._dec.put(hi - lo, token=tokens[lo:hi], embd=g[lo:hi],
                          pos=np.arange(self._cell(pos0 + lo), self._cell(pos0 + hi)), seq=seq, want=False)
            if last_out and hi == n:
                self._dec.logits[hi - lo - 1] = True
            self._process(self._dec, hi - lo)
        if not follows:
            self._written_apart(ids)

    def _follows(self, ids: _LaneIds, pos: int) -> bool:
        """Can entries from `pos` on go straight into every committed id? llama.cpp wants a
        sequence's new position to follow its last one: where the entries before `pos` are not all
        held (a window dropped them, and a reused prompt was cut inside that gap, or the window
        skips entries) they are decoded under the empty `write` id and copied."""
        return self._ll.llama_memory_seq_pos_max(self._mem, ids.base) in (-1, self._cell(pos) - 1)

    def _written_apart(self, ids: _LaneIds) -> None:
        """The entries just decoded under `write` join every committed id; `write` is empty again."""
        for s in ids.committed:
            self._ll.llama_memory_seq_cp(self._mem, ids.write, s, -1, -1)
        self._ll.llama_memory_seq_rm(self._mem, ids.write, -1, -1)

    def seed(self, lane: int, tokens: Sequence[int], g: np.ndarray, pos0: int, k: int) -> Candidates:
        """Committed entries (tokens[i], g[i]) at positions pos0 + i, the last the newest (its token the
        root), whose output drafts the root's children: written in one call where they fit a batch, the
        seed's row its only output. They stay in the lane's base sequence."""
        if len(tokens) > 1 and not (self._rows_pruned and self._follows(self._ids[lane], pos0)):
            # written apart (under `write`) they see only each other: the seed must see all the lane holds; and a
            # graph that does not prune its rows to the outputs hands back the first rows, not the seed's
            self.write(lane, tokens[:-1], g[:-1], pos0)
            tokens, g, pos0 = tokens[-1:], g[-1:], pos0 + len(tokens) - 1
        self._entries(lane, tokens, g, pos0, last_out=True)
        return self._candidates(1, k)

    # --- tree levels ---------------------------------------------------------------------------

    def level(self, lane: int, depth: int, tokens: Sequence[int], hidden: np.ndarray, parents: Sequence[int],
              pos: int, k: int) -> Candidates:
        """Decode the nodes drafted at `depth` (>= 1): node r is tokens[r], fed hidden[r] (its
        parent's output row), child of row parents[r] of the previous level (-1: the seed).
        -> each node's best k children."""
        ids, ll = self._ids[lane], self._ll
        mine, prev = ids.sets[depth % 2], ids.sets[(depth - 1) % 2]
        if depth == 1:  # every id already holds the committed entries: the seed's children need no copy
            self._tree_from[lane] = self._cell(pos)
        else:
            first = self._tree_from[lane]
            for r, p in enumerate(parents):  # the node's ancestors: its parent's tree cells
                ll.llama_memory_seq_cp(self._mem, prev[p], mine[r], first, -1)
            for s in prev:  # the previous level's ids: its cells stay where a child's id holds them
                ll.llama_memory_seq_rm(self._mem, s, first, -1)
        n = len(tokens)
        self._dec.put(n, token=tokens, embd=hidden, pos=self._cell(pos), seq=np.asarray(mine[:n]), want=True)
        self._process(self._dec, n)
        return self._candidates(n, k)

    def grow(self, lane: int, seed: Candidates, pos: int, *, depth: int, topk: int) -> Grown | None:
        """Every candidate of the tree from the seed's children, its level 1 at `pos`, in one llama.cpp
        call: what grow_tree over level() and end_tree() make (None where this build or head cannot)."""
        native = self.native_tree
        if native is None or topk > self.topk or seed.ids.shape[1] < topk or lane in self._tree_from:
            return None
        levels = max(1, depth - 1)
        n_threads = self._use_threads(topk, calls=levels)  # every level has at most topk rows: one kind of decode
        with capture_log(self._log):
            grown, seconds = native.grow(lane, seed, self._cell(pos), depth=depth, topk=topk)
        if depth > 1:
            self._threads.record(topk, n_threads, seconds, calls=levels)
        return grown

    def draft(self, lane: int, tokens: Sequence[int], features: np.ndarray, pos0: int, *, depth: int, topk: int,
              total: int) -> tuple[DraftTree, Candidates] | None:
        """A step's draft in one llama.cpp call (homespec's patch: llama_homespec_draft_tree): what encode(),
        seed(), grow() and keep_best make of the committed entries (tokens[i], target features[i]) at
        positions pos0 + i, the last the seed; None where this build, head or call cannot (entries that do
        not follow on from the lane's, more than a batch of them)."""
        native = self.native_tree
        if (native is None or not native.drafts or topk > self.topk or lane in self._tree_from
                or len(tokens) > min(self._batch_cap, self._enc_cap) or features.shape[1] != 3 * self.info.target_hidden
                or not self._follows(self._ids[lane], pos0)):
            return None
        calls = depth + 1  # the encoder's, the entries' and each level's: few rows each
        n_threads = self._use_threads(topk, calls=calls)
        with capture_log(self._log):
            tree, seed, seconds = native.draft(lane, tokens, features, self._cell(pos0), depth=depth, topk=topk,
                                               total=total)
        if len(tokens) <= topk:  # a catch-up's many entries would read as slow levels
            self._threads.record(topk, n_threads, seconds, calls=calls)
        return tree, seed

    def end_tree(self, lane: int) -> None:
        """Take the tree's cells out of every tree id of the lane (they are freed with it); the
        committed entries keep them."""
        first = self._tree_from.pop(lane, None)
        if first is not None:
            for s in self._ids[lane].tree:
                self._ll.llama_memory_seq_rm(self._mem, s, first, -1)

    # --- the lane's memory ---------------------------------------------------------------------

    def forget(self, lane: int, p0: int, p1: int) -> None:
        """Drop the lane's committed entries at positions [p0, p1) (outside its window)."""
        if p1 > p0:
            self._drop(lane, p0, p1)

    def trim(self, lane: int, keep: int) -> None:
        """Keep the lane's entries at positions < keep."""
        self.end_tree(lane)
        self._drop(lane, keep, -1)

    def reset(self, lane: int) -> None:
        self.end_tree(lane)
        self._drop(lane, -1, -1)

    def _drop(self, lane: int, p0: int, p1: int) -> None:
        """Committed entries at positions [p0, p1) out of every id that holds them (-1: open)."""
        c0, c1 = (self._cell(p) if p >= 0 else -1 for p in (p0, p1))
        if self.lanes == 1 and lane not in self._tree_from:  # every id holds these cells alike: one pass
            self._ll.llama_memory_seq_rm(self._mem, -1, c0, c1)
            return
        for s in self._ids[lane].committed:
            self._ll.llama_memory_seq_rm(self._mem, s, c0, c1)

    def save(self, lane: int) -> bytes:
        """The lane's committed entries as llama.cpp's sequence state (--cache-ram)."""
        ll, seq = self._ll, self._ids[lane].base
        size = ll.llama_state_seq_get_size(self._ctx, seq)
        buf = (ctypes.c_uint8 * size)()
        n = ll.llama_state_seq_get_data(self._ctx, buf, size, seq)
        return bytes(buf[:n])

    def load(self, lane: int, data: bytes) -> bool:
        self.reset(lane)
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        ids = self._ids[lane]
        if not self._ll.llama_state_seq_set_data(self._ctx, buf, len(data), ids.base):
            return False
        for s in ids.tree:  # the loaded entries join every tree id, as written ones do
            self._ll.llama_memory_seq_cp(self._mem, ids.base, s, -1, -1)
        return True

    def memory_report(self) -> MemoryReport:
        """llama.cpp's own buffer sizes for the head (plan-vs-actual: the plan's draft lines)."""
        return memory_report(self._log)

    # --- batches and outputs --------------------------------------------------------------------

    def _cell(self, pos: int) -> int:
        """The position in the cache of the frame's entry at `pos` (the same here)."""
        return pos

    def _use_threads(self, n_rows: int, *, calls: int = 1) -> int:
        """The count measured fastest for `calls` decodes of `n_rows` rows (backends/llamacpp/threads.py),
        set on the context. -> it"""
        n_threads = self._threads.pick(n_rows, calls=calls)
        if n_threads != self._threads_now:
            self._ll.llama_set_n_threads(self._ctx, n_threads, n_threads)
            self._threads_now = n_threads
        return n_threads

    def _process(self, batch: Batch, n_rows: int, *, encode: bool = False) -> None:
        n_threads = self._use_threads(n_rows)
        t0 = time.perf_counter()
        with capture_log(self._log):
            rc = (self._ll.llama_encode if encode else self._ll.llama_decode)(self._ctx, batch.c)
        self._threads.record(n_rows, n_threads, time.perf_counter() - t0)
        if rc != 0:
            raise HomespecError(f"the draft head's llama.cpp call failed (code {rc}): {reason(self._log, 'no detail')}",
                                hint="code 1 means its KV cache is full: a larger --ctx helps")

    def _candidates(self, n: int, k: int) -> Candidates:
        """The best k children of each of the last call's n output rows, from its logits, and the
        rows the next level consumes. Log-probabilities are normalised over the head's draft
        vocabulary (the other ids are -inf in the graph's output)."""
        hidden = self._nextn_rows.rows_at(self._nextn_at(self._ctx), n).copy()
        if self.device_topk:
            ids, logp = self._sampled(n, k)
        else:
            logits = self._logit_rows.rows_at(self._logits_at(self._ctx), n)  # [n, V] a view
            ids, logp = top_children(logits, self.info.draft_vocab, k, self._full_vocab)
        return Candidates(ids, logp, hidden)

    def _sampled(self, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The device's top-k of each output row, best first: [k draft-vocabulary indices as floats,
        k log-probabilities, padding] per row of the embeddings channel (not sorted by ggml)."""
        rows = self._embd_rows.rows_at(self._embd_at(self._ctx), n)
        top = self.topk
        logp = rows[:, top:2 * top]
        order = np.argsort(-logp, axis=1, kind="stable")[:, :k]  # [n, k] best first
        at = self._row_ids[:n]  # [n, 1] each row's index, to pick along the rows
        idx = rows[at, order].astype(np.int64)
        return (idx if self._full_vocab else self.info.draft_vocab[idx]), logp[at, order].astype(np.float64)

    # --- teardown ------------------------------------------------------------------------------

    def close(self) -> None:
        ll = getattr(self, "_ll", None)
        if ll is None:
            return
        if self._ctx:
            ll.llama_free(self._ctx)
            self._ctx = None
        if self._model:
            ll.llama_model_free(self._model)
            self._model = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def top_children(logits: np.ndarray, vocab: np.ndarray, k: int, full: bool) -> tuple[np.ndarray, np.ndarray]:
    """[n, V] logits over the target vocabulary -> ([n, k] ids best first, [n, k] log-probs).

    Only the head's draft vocabulary can be drafted (the graph writes -inf elsewhere), so the rows
    are gathered there first: an 8k-token draft vocabulary beside a 49k-token target is a sixth of
    the work. log p = logit - logsumexp over the row."""
    rows = logits if full else logits[:, vocab]  # [n, Vd]
    k = min(k, rows.shape[1])
    part = np.argpartition(rows, -k, axis=1)[:, -k:]  # [n, k] the k largest, unordered
    top = np.take_along_axis(rows, part, axis=1)
    order = np.argsort(-top, axis=1, kind="stable")
    part, top = np.take_along_axis(part, order, axis=1), np.take_along_axis(top, order, axis=1)
    peak = top[:, :1].astype(np.float64)
    lse = peak + np.log(np.exp(rows - peak.astype(np.float32)).sum(axis=1, dtype=np.float64, keepdims=True))
    ids = part if full else vocab[part]
    return ids.astype(np.int64), top.astype(np.float64) - lse
