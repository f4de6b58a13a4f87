"""Capturing target features (the inputs of chosen decoder layers) during llama_decode.

Two ways, same numbers (the test suite checks they agree bit for bit):

* `LayerInputCapture` — llama.cpp's own extraction (`llama_set_embeddings_layer_inp`): the graph
  marks each requested layer input as an output and llama_decode copies every token's row into
  a host buffer asynchronously. No Python runs inside the forward pass.
* `EvalCallbackCapture` — a `cb_eval` scheduler callback. llama.cpp asks it about every graph
  node (the `ask` phase); it says yes only for the wanted tensors, the scheduler splits the graph
  there, and the callback copies the tensor out. Works on any build, but a Python call per
  graph node per decode is overhead (docs/backends.md has the measurements), so it is the
  fallback for builds that do not export the extraction entry points.

Layer i's input is the graph node `embd` for i == 0 (the token rows after get_rows and any
embedding scale; `inp_embd` is only the placeholder for embedding inputs) and `l_out-(i-1)`
otherwise: the same tensors the extraction entry points mark (llama.cpp src/llama-graph.cpp). Only
layers 0 .. n_layer-1 are offered: llama.cpp prunes the last layer's output to the rows that
produce logits, so "the input of layer n_layer" would be incomplete for most tokens.
"""

from __future__ import annotations

import ctypes
from typing import Any, Sequence

import numpy as np

from homespec.backends.llamacpp.lib import Held, HostRows, ggml_tensor_api, nextn_getter
from homespec.errors import HomespecError


def check_layers(layers: Sequence[int], n_layer: int) -> tuple[int, ...]:
    out = tuple(int(i) for i in layers)
    for i in out:
        if not 0 <= i < n_layer:
            raise ValueError(f"feature layer {i} is outside 0..{n_layer - 1}")
    return out


class FeatureRows:
    """A pass's feature rows left where llama.cpp's extraction put them, gathered when read: a
    greedy tree step's drafter reads the rows of the few nodes it accepted, not all of them (48
    rows x 3 layers of an 8B target: 2.4 MB a step not copied). `rows[nodes]` -> [len(nodes),
    k*H] float32, node i being batch row `order[i]`. Valid until the next llama_decode rewrites the
    buffers: the engine's step reads them first, as it reads a viewed pass's logits."""

    def __init__(self, views: list[np.ndarray], order: Sequence[int]) -> None:
        self._views = views  # per layer [n_rows, H], views of llama.cpp's buffers
        self._order = np.asarray(order, dtype=np.intp)
        self.shape = (len(self._order), sum(v.shape[1] for v in views))

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, nodes: Any) -> np.ndarray:
        index = self._order[np.asarray(nodes, dtype=np.intp)]
        return np.concatenate([v[index] for v in self._views], axis=1)


class GatheredRows:
    """FeatureRows gathered by llama.cpp itself (homespec's patch: llama_homespec_layer_rows): `rows[nodes]`
    copies each node's row of every layer side by side in one call, where FeatureRows makes a view per
    layer each pass and gathers and joins them with numpy. The same rows; valid until the next
    llama_decode, as FeatureRows. Measured here, paired step by step in one run: 37-57 us less host time a
    48-node step (docs/results/2026-12-07/llamacpp/host-step/paired-gather.txt). The layers are the
    capture's when the rows are read (FeatureRows keeps the pass's views): set_layers between a pass and
    its read would change them; the engine reads a pass's features before anything else runs."""

    def __init__(self, capture: "LayerInputCapture", order: Sequence[int]) -> None:
        self._cap, self._order = capture, order
        self.shape = (len(order), capture.width)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, nodes: Sequence[int]) -> np.ndarray:
        order = self._order
        return self._cap.gather([order[i] for i in nodes])


class LayerInputCapture:
    kind = "layer_inp"

    def __init__(self, entry_points: tuple[Any, Any], n_layer: int, n_embd: int, *, gather: Any = None) -> None:
        """gather: llama_homespec_layer_rows where the build has it (rows() then hands out GatheredRows)."""
        self.ctx: Any = None  # the llama_context, bound once it exists (the context needs the capture kind first)
        self._set, self._get = entry_points
        self._gather = gather
        self._n_layer = n_layer
        self._n_embd = n_embd
        self.layers: tuple[int, ...] = ()
        self._layer_ids = (ctypes.c_int32 * 0)()  # the layers as the gather reads them
        self._bufs: dict[int, HostRows] = {}  # layer -> its extraction buffer as numpy
        self._rows = (ctypes.c_int32 * 0)()  # the gather's rows and output, grown as needed
        self._out = Held(np.empty((0, 0), dtype=np.float32))

    @property
    def width(self) -> int:
        """A row's width: every layer's side by side."""
        return len(self.layers) * self._n_embd

    def gather(self, rows: list[int]) -> np.ndarray:
        """The last decode's batch rows `rows`, every layer side by side (llama_homespec_layer_rows).
        -> [len(rows), width] float32, a copy."""
        n = len(rows)
        if n > len(self._rows) or self._out.a.shape[1] != self.width:
            self._rows = (ctypes.c_int32 * max(n, 16))()
            self._out = Held(np.empty((len(self._rows), self.width), dtype=np.float32))
        self._rows[:n] = rows
        rc = self._gather(self.ctx, len(self._layer_ids), self._layer_ids, n, self._rows, self._out.addr)
        if rc != 0:
            raise HomespecError(f"llama_homespec_layer_rows failed (code {rc}) for rows {rows}",
                                hint="a bug in homespec: please report it")
        return self._out.a[:n].copy()  # the kept buffer (its address taken once) is the next gather's

    def set_layers(self, layers: Sequence[int]) -> None:
        layers = check_layers(layers, self._n_layer)
        for i in set(self.layers) - set(layers):
            self._set(self.ctx, i, False)
        for i in set(layers) - set(self.layers):
            self._set(self.ctx, i, True)
        self.layers = layers
        self._layer_ids = (ctypes.c_int32 * len(layers))(*layers)

    def begin(self) -> None:
        """Nothing to reset: llama.cpp rewrites its buffers on every decode."""

    def rows(self, n_tokens: int, order: Sequence[int]) -> FeatureRows | GatheredRows | None:
        """The last llama_decode call's rows left in llama.cpp's buffers, node i at batch row
        order[i], gathered only as they are read (GatheredRows where the build can, else FeatureRows)."""
        if not self.layers:
            return None
        if self._gather is not None:
            return GatheredRows(self, order)
        views = [self._bufs.setdefault(layer, HostRows(self._n_embd)).rows_at(self._get(self.ctx, layer), n_tokens)
                 for layer in self.layers]
        return FeatureRows(views, order)

    def collect(self, n_tokens: int, order: Sequence[int] | np.ndarray | None = None) -> np.ndarray | None:
        """Rows of the last llama_decode call, in batch order or `order`'s (row indices), copied
        once out of llama.cpp's extraction buffers. -> [n_tokens or len(order), k*H] float32"""
        if not self.layers:
            return None
        index = None if order is None else np.asarray(order, dtype=np.intp)
        n = n_tokens if index is None else len(index)
        out = np.empty((n, len(self.layers) * self._n_embd), dtype=np.float32)
        for j, layer in enumerate(self.layers):
            rows = self._bufs.setdefault(layer, HostRows(self._n_embd)).rows_at(self._get(self.ctx, layer), n_tokens)
            out[:, j * self._n_embd : (j + 1) * self._n_embd] = rows if index is None else rows[index]
        return out


class EvalCallbackCapture:
    kind = "eval_callback"

    def __init__(self, llama_cpp: Any, n_layer: int, n_embd: int) -> None:
        self._g = ggml_tensor_api()
        self._n_layer = n_layer
        self._n_embd = n_embd
        self.layers: tuple[int, ...] = ()
        self._slot: dict[bytes, int] = {}  # tensor name -> position in feature order
        self._chunks: list[list[np.ndarray]] = []
        self._error: BaseException | None = None
        # llama.cpp holds only the raw function pointer: this object keeps it alive.
        self.callback = llama_cpp.ggml_backend_sched_eval_callback(self._on_eval)

    def set_layers(self, layers: Sequence[int]) -> None:
        self.layers = check_layers(layers, self._n_layer)
        self._slot = {self.tensor_name(i): j for j, i in enumerate(self.layers)}

    @staticmethod
    def tensor_name(layer: int) -> bytes:
        return b"embd" if layer == 0 else f"l_out-{layer - 1}".encode()

    def begin(self) -> None:
        self._chunks = [[] for _ in self.layers]
        self._error = None

    def _on_eval(self, tensor: int, ask: bool, _user: Any) -> bool:
        # An exception must not escape into C (ctypes would return False and abort the graph).
        try:
            slot = self._slot.get(self._g.ggml_get_name(tensor)) if self._slot else None
            if ask or slot is None:
                return slot is not None
            n_bytes = self._g.ggml_nbytes(tensor)
            rows = self._g.ggml_nrows(tensor)
            # [rows, H] float32: one ubatch worth of this layer's input
            buf = np.empty((rows, n_bytes // 4 // rows), dtype=np.float32)
            self._g.ggml_backend_tensor_get(tensor, buf.ctypes.data_as(ctypes.c_void_p), 0, n_bytes)
            self._chunks[slot].append(buf)
        except BaseException as e:  # noqa: BLE001 - re-raised by collect()
            self._error = e
        return True

    def collect(self, n_tokens: int, order: Sequence[int] | np.ndarray | None = None) -> np.ndarray | None:
        """Rows of the last llama_decode call, in batch order or `order`'s. -> [n, k*H] float32"""
        if self._error is not None:
            raise RuntimeError(f"feature capture failed inside llama_decode: {self._error}") from self._error
        if not self.layers:
            return None
        parts = []
        for j, chunks in enumerate(self._chunks):
            rows = np.concatenate(chunks, axis=0) if chunks else np.empty((0, self._n_embd), np.float32)
            if rows.shape != (n_tokens, self._n_embd):
                raise RuntimeError(
                    f"captured {rows.shape} for layer {self.layers[j]}, expected ({n_tokens}, {self._n_embd})"
                )
            parts.append(rows if order is None else rows[np.asarray(order, dtype=np.intp)])
        return np.concatenate(parts, axis=1)  # [n, k*H]


class NextnCapture:
    """The target's own hidden state of every row (llama.cpp's `t_h_nextn`: the output-normed last
    layer, what a model's MTP layers read beside the next token), for --method mtp. llama.cpp copies
    every row of a decode (`llama_set_embeddings_nextn(ctx, true, masked=false)`, as
    common/speculative.cpp sets the target of its MTP drafter) into a host buffer, in batch order."""

    kind = "nextn"
    layers: tuple[int, ...] = ()

    def __init__(self, ext: Any, ctx: Any, n_embd: int) -> None:
        self._ext, self.ctx = ext, ctx
        self._rows = HostRows(n_embd)
        self._nextn_at = nextn_getter()
        ext.llama_set_embeddings_nextn(ctx, True, False)

    def set_layers(self, layers: Sequence[int]) -> None:
        raise ValueError("the target hands its MTP layers its last hidden state, not chosen layers' inputs")

    def stop(self) -> None:
        """No more copies of the rows (a bench's next method reads none)."""
        self._ext.llama_set_embeddings_nextn(self.ctx, False, False)

    def begin(self) -> None:
        """Nothing to reset: llama.cpp rewrites its buffer on every decode."""

    def collect(self, n_tokens: int, order: Sequence[int] | np.ndarray | None = None) -> np.ndarray:
        """Rows of the last llama_decode call, in batch order or `order`'s. -> [n, H] float32 (a copy)."""
        rows = self._rows.rows_at(self._nextn_at(self.ctx), n_tokens)
        return rows.copy() if order is None else rows[np.asarray(order, dtype=np.intp)]
