"""ctypes glue around llama-cpp-python's low-level bindings: import, log capture, extra entry points.

Only imported lazily (by backends/llamacpp/backend.py), so it may import llama_cpp at call time freely.
"""

from __future__ import annotations

import ctypes
import os
import re
import sys
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from homespec.backends.llamacpp.exports import ENTRY_POINTS, entry_point, llama_library
from homespec.contracts.backend import MemoryReport
from homespec.errors import HomespecError

# ggml_log_level (ggml.h): CONT continues the previous line at its level.
_LEVEL_DEBUG = 1
_LEVEL_ERROR = 4
_LEVEL_CONT = 5


def import_llama_cpp() -> Any:
    try:
        import llama_cpp
    except (ImportError, OSError) as e:
        raise HomespecError(
            f"llama-cpp-python is not usable: {e}",
            hint="run `bash scripts/setup.sh` (it builds llama-cpp-python 0.3.36 for this machine)",
        ) from e
    _init_backend(llama_cpp)
    return llama_cpp


_backend_ready = False


def _init_backend(llama_cpp: Any) -> None:
    global _backend_ready
    if not _backend_ready:
        LOG.install(llama_cpp)
        llama_cpp.llama_backend_init()
        _backend_ready = True


# --- log capture ------------------------------------------------------------------------------


@dataclass
class LogCollector:
    """Log lines llama.cpp wrote while this collector was active."""

    # (ggml log level, line); bounded, as llama.cpp may log during every decode
    tagged: deque[tuple[int, str]] = field(default_factory=lambda: deque(maxlen=4096))

    @property
    def lines(self) -> list[str]:
        return [line for _, line in self.tagged]

    def errors(self) -> list[str]:
        return [line for lvl, line in self.tagged if lvl == _LEVEL_ERROR]


class _LogRouter:
    """One process-wide llama_log_set callback (llama.cpp keeps a single global logger).

    Lines go to the collector that is active on the calling thread (a backend activates its
    own around load and decode), and to stderr when HOMESPEC_DEBUG or HOMESPEC_LLAMA_LOG is set.
    The last lines are kept to explain a NULL return that happens with no collector active.
    """

    def __init__(self) -> None:
        self._cb = None  # the ctypes callback object: must stay referenced while installed
        self._min_level: Any = None  # llama_homespec_log_min_level where the build has it
        self._local = threading.local()
        self._partial = ""
        self._level = 0
        self.recent: deque[tuple[int, str]] = deque(maxlen=64)

    def install(self, llama_cpp: Any) -> None:
        if self._cb is None:
            self._cb = llama_cpp.llama_log_callback(self._on_log)
            self._set = llama_cpp.llama_log_set
            self._min_level = _min_level_entry_point()
        self.reclaim()

    def reclaim(self) -> None:
        """Be llama.cpp's logger again: whatever else sets its one global callback (llama-cpp-python's
        `Llama`, another binding in the process) would otherwise take the lines a load's memory report
        is read from. Where homespec's patch can, llama.cpp drops its debug lines itself (a decode logs
        one or two, each a call into Python) unless they are echoed."""
        if self._cb is not None:
            self._set(self._cb, ctypes.c_void_p(0))
            if self._min_level is not None:
                self._min_level(0 if _echo() else _LEVEL_DEBUG + 1)

    def _on_log(self, level: int, text: bytes, _user: Any) -> None:
        if level != _LEVEL_CONT:
            self._level = level
        echo = _echo()
        if self._level == _LEVEL_DEBUG and not self._partial and not echo:
            return  # a debug line no collector keeps (llama_set_n_threads logs one a call)
        s = self._partial + (text or b"").decode("utf-8", "replace")
        *done, self._partial = s.split("\n")
        collector: LogCollector | None = getattr(self._local, "collector", None)
        for line in done:
            self.recent.append((self._level, line))
            if collector is not None and self._level != _LEVEL_DEBUG:
                collector.tagged.append((self._level, line))
            if echo:
                print(f"llama.cpp: {line}", file=sys.stderr)

    def activate(self, collector: LogCollector | None) -> LogCollector | None:
        prev = getattr(self._local, "collector", None)
        self._local.collector = collector
        return prev

    def recent_errors(self) -> list[str]:
        return [line for lvl, line in self.recent if lvl == _LEVEL_ERROR]


def _echo() -> bool:
    """Are llama.cpp's lines, its debug lines too, echoed to stderr?"""
    return bool(os.environ.get("HOMESPEC_DEBUG") or os.environ.get("HOMESPEC_LLAMA_LOG"))


def _min_level_entry_point() -> Any | None:
    """llama_homespec_log_min_level, typed; None where the build lacks it."""
    from homespec.backends.llamacpp import exports

    return exports.typed_entry_point(exports.LOG_SYMBOL, exports.LOG_LEVEL, [ctypes.c_int32], None)


LOG = _LogRouter()


class capture_log:
    """`with capture_log(collector): ...` routes llama.cpp's log lines to `collector`; `load=True`
    (around a model's or a context's creation) first makes sure the router is llama.cpp's logger."""

    def __init__(self, collector: LogCollector, *, load: bool = False) -> None:
        self._collector = collector
        self._load = load
        self._prev: LogCollector | None = None

    def __enter__(self) -> LogCollector:
        if self._load:
            LOG.reclaim()
        self._prev = LOG.activate(self._collector)
        return self._collector

    def __exit__(self, *exc: object) -> None:
        LOG.activate(self._prev)


def reason(collector: LogCollector, fallback: str) -> str:
    """The root cause llama.cpp logged: its first error line, without the `function:` prefix
    (the later lines only repeat "failed to load model")."""
    errs = [re.sub(r"^\w+:\s*", "", line.strip()) for line in (collector.errors() or LOG.recent_errors())]
    causes = [e for e in errs if e and "failed to load model" not in e]
    if causes:
        return causes[0]
    return errs[-1] if errs else fallback


# --- llama.cpp's float buffers as numpy ----------------------------------------------------------


class HostRows:
    """A numpy view of a float32 buffer llama.cpp owns ([rows, cols]: its logits, a layer's
    extracted inputs), made once per buffer: llama.cpp keeps the buffer across decodes and
    reallocates it only to grow, and np.ctypeslib.as_array costs ~8 us a call. A view is read
    before the next llama_decode rewrites the buffer."""

    def __init__(self, cols: int) -> None:
        self.cols = cols
        self._addr: int | None = None
        self._view: np.ndarray | None = None

    def rows_at(self, addr: int, n: int) -> np.ndarray:
        """The first n rows of the buffer at address `addr` (not 0): what a getter typed to return an
        address hands over without a pointer object and ctypes.cast, Python code whose first use after a
        decode costs tens of microseconds here (docs/backends.md, "Host work per step")."""
        if addr != self._addr or self._view.shape[0] < n:
            self._view = np.ctypeslib.as_array(ctypes.cast(addr, ctypes.POINTER(ctypes.c_float)), shape=(n, self.cols))
            self._addr = addr
        return self._view[:n]


class Held:
    """An array a llama.cpp call reads or writes, kept with its address: numpy's `.ctypes` is Python code
    whose first use after a decode costs tens of microseconds here (docs/backends.md, "Host work per step")."""

    __slots__ = ("a", "addr")

    def __init__(self, a: np.ndarray) -> None:
        self.a, self.addr = a, a.ctypes.data


def address_getter(lib: Any, symbols: str | tuple[str, ...], argtypes: tuple[Any, ...] = (ctypes.c_void_p,)) -> Any:
    """A getter of a float buffer llama.cpp owns (`float *(struct llama_context *, ...)`), the first of
    `symbols` `lib` exports (an entry point's plain and mangled names: exports.ENTRY_POINTS), as a function
    object of its own typed to return the address as an int, for HostRows.rows_at (llama-cpp-python's
    shared one returns a pointer object); None where `lib` exports none of them."""
    for symbol in (symbols,) if isinstance(symbols, str) else symbols:
        try:
            fn = lib[symbol]  # a new function object: setting its types leaves llama-cpp-python's alone
        except AttributeError:  # a CDLL's answer for a symbol it lacks
            continue
        fn.argtypes, fn.restype = list(argtypes), ctypes.c_void_p
        return fn
    return None


def nextn_getter() -> Any:
    """llama_get_embeddings_nextn (declared in llama-ext.h, so exported under its mangled name where the
    build has no plain one) as an address getter."""
    return address_getter(llama_library(), ENTRY_POINTS["llama_get_embeddings_nextn"])


# --- memory figures from the log ----------------------------------------------------------------

_MIB = 1024 * 1024
_BUF_LINE = re.compile(r"^\s*\w+:\s+(\S+)\s+(model|KV|compute|output)\s+buffer size\s*=\s*([\d.]+)\s*MiB")


@dataclass(frozen=True, slots=True)
class BufferLine:
    kind: str  # "model" | "KV" | "compute" | "output"
    buffer: str  # ggml buffer name: "CPU", "CPU_Mapped", "CUDA0", "CUDA_Host", "MTL0", ...
    n_bytes: int


def parse_buffer_lines(lines: list[str]) -> list[BufferLine]:
    """llama.cpp prints sizes in MiB with two decimals, so each figure is good to ~5 KiB."""
    out = []
    for line in lines:
        m = _BUF_LINE.match(line)
        if m:
            out.append(BufferLine(m.group(2), m.group(1), round(float(m.group(3)) * _MIB)))
    return out


def tally_buffers(found: list[BufferLine]) -> dict[str, dict[str, int]]:
    """{kind: {buffer: bytes}}. Model and KV buffers are allocated once per load (a model with a
    sliding-window cache prints two KV lines per device: they add up); compute and output buffers
    are re-reserved when the graph changes, and the latest figure is the one in use."""
    out: dict[str, dict[str, int]] = {"model": {}, "KV": {}, "compute": {}, "output": {}}
    for b in found:
        slot = out[b.kind]
        if b.kind in ("model", "KV"):
            slot[b.buffer] = slot.get(b.buffer, 0) + b.n_bytes
        else:
            slot[b.buffer] = b.n_bytes
    return out


def memory_report(collector: LogCollector) -> MemoryReport:
    """llama.cpp's own buffer sizes for one model and its context, from the lines it logged."""
    t = tally_buffers(parse_buffer_lines(collector.lines))
    devices = [buf for bufs in t.values() for buf in bufs if not buf.startswith("CPU")]
    return MemoryReport(
        weights_bytes=sum(t["model"].values()),
        kv_bytes=sum(t["KV"].values()),
        compute_bytes=sum(t["compute"].values()) + sum(t["output"].values()),
        device=devices[0] if devices else "CPU",
        detail={f"{kind}:{buf}": v for kind, bufs in t.items() for buf, v in bufs.items()},
    )


# --- extra entry points -------------------------------------------------------------------------


def layer_inp_entry_points(llama_cpp: Any) -> tuple[Any, Any] | None:
    """(set, get) for per-layer input extraction, or None when this build does not export them
    (llama-ext.h declares them as C++ functions: homespec.backends.llamacpp.exports has their names)."""
    lib = llama_cpp.llama_cpp._lib
    set_fn = entry_point("llama_set_embeddings_layer_inp", lib)
    get_fn = address_getter(lib, ENTRY_POINTS["llama_get_embeddings_layer_inp"], (ctypes.c_void_p, ctypes.c_uint32))
    if set_fn is None or get_fn is None:
        return None
    set_fn.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_bool]
    set_fn.restype = None
    return set_fn, get_fn


_ggml_ready: Any = None


def ggml_tensor_api() -> Any:
    """libggml with the few tensor accessors an eval callback needs (argtypes set here: the
    Python package declares none of them)."""
    global _ggml_ready
    if _ggml_ready is None:
        from llama_cpp import _ggml

        g = _ggml.libggml
        g.ggml_get_name.argtypes = [ctypes.c_void_p]
        g.ggml_get_name.restype = ctypes.c_char_p
        g.ggml_nbytes.argtypes = [ctypes.c_void_p]
        g.ggml_nbytes.restype = ctypes.c_size_t
        g.ggml_nrows.argtypes = [ctypes.c_void_p]
        g.ggml_nrows.restype = ctypes.c_int64
        g.ggml_nelements.argtypes = [ctypes.c_void_p]
        g.ggml_nelements.restype = ctypes.c_int64
        g.ggml_is_contiguous.argtypes = [ctypes.c_void_p]
        g.ggml_is_contiguous.restype = ctypes.c_bool
        g.ggml_backend_tensor_get.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]
        g.ggml_backend_tensor_get.restype = None
        _ggml_ready = g
    return _ggml_ready


def free_handles(owner: Any) -> None:
    """Free an owner's llama.cpp batch, context and model (in that order), once."""
    ll = getattr(owner, "_ll", None)
    if ll is None:
        return
    if getattr(owner, "_batch", None) is not None:
        ll.llama_batch_free(owner._batch)
        owner._batch = None
    if getattr(owner, "_ctx", None):
        ll.llama_free(owner._ctx)
        owner._ctx = None
    if getattr(owner, "_model", None):
        ll.llama_model_free(owner._model)
        owner._model = None
