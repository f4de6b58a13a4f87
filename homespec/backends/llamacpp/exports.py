"""What the installed llama.cpp exports beyond llama.h: the entry points homespec calls, and the
EAGLE-3.1 features of its eagle3 graph.

The vendored llama.cpp declares its feature extraction and draft-head entry points in
`src/llama-ext.h` as C++ functions, so they are exported under their Itanium-mangled names
(llama-cpp-python's `llama_cpp_ext` tries the plain name first, then the mangled ones).
homespec's patch (kernels/llamacpp/eagle3.1.patch, applied by scripts/setup.sh) adds
`extern "C" uint32_t llama_homespec_eagle3_features(void)`: a bit set of the EAGLE-3.1 features
its eagle3 graph runs (FC_NORM, NORM_OUTPUT) and DRAFT_TREES (the decoder's output rows pruned, the
log-softmax sampler homespec's tree drafting uses; backends/llamacpp/head.py). A build without the patch (a user's own, or
upstream's) lacks the symbol: `eagle3_features` answers 0 and an EAGLE-3.1 head then runs as
its folded EAGLE-3 twin (homespec.backends.llamacpp.head_convert).

Nothing here imports torch; llama_cpp is imported only when no library is passed.
"""

from __future__ import annotations

import ctypes
from typing import Any

FC_NORM = 1  # eagle3.fc_norm: one RMSNorm per target feature before fc
NORM_OUTPUT = 2  # eagle3.norm_output: the next draft step reads the final-normed output
EAGLE31 = FC_NORM | NORM_OUTPUT
# the decoder keeps only the rows asked for (a call may mix committed entries with drafting rows) and
# llama_sampler_init_log_softmax exists (each tree node's best children picked on the device)
DRAFT_TREES = 4
GROW_TREES = 8  # llama_homespec_grow_tree: a draft tree's levels grown in one call (backends/llamacpp/head_tree.py)
# with the device's top-k on (embeddings on: its channel), a decode's outputs are the rows asked for; llama.cpp
# makes every row of an embeddings context an output, so committed entries could not share a call with the seed
ROWS_ASKED = 16
KEEP_PATH = 32  # llama_homespec_keep_path: a verified tree's kept path in one call (LlamaCppCore._keep_path)
DRAFT_STEP = 64  # llama_homespec_draft_tree: a step's draft (seed's entries, tree, best kept) in one call
LOG_LEVEL = 128  # llama_homespec_log_min_level: log lines below a level dropped before they reach Python
LAYER_ROWS = 256  # llama_homespec_layer_rows: a pass's feature rows of every layer gathered in one call
# every feature the patch in kernels/llamacpp/ gives this build (set-up builds it; a test checks the build has them)
PATCH_FEATURES = EAGLE31 | DRAFT_TREES | GROW_TREES | ROWS_ASKED | KEEP_PATH | DRAFT_STEP | LOG_LEVEL | LAYER_ROWS
FEATURES_SYMBOL = "llama_homespec_eagle3_features"
TOPK_SYMBOL = "llama_homespec_eagle3_set_topk"  # (model, k): rows leave as their k best children
GROW_SYMBOL = "llama_homespec_grow_tree"
KEEP_SYMBOL = "llama_homespec_keep_path"
DRAFT_SYMBOL = "llama_homespec_draft_tree"
LOG_SYMBOL = "llama_homespec_log_min_level"
LAYER_ROWS_SYMBOL = "llama_homespec_layer_rows"

# what homespec calls each entry point -> the symbols it may be exported under (Linux/macOS mangling)
ENTRY_POINTS: dict[str, tuple[str, ...]] = {
    "llama_set_embeddings_layer_inp": ("llama_set_embeddings_layer_inp",
                                       "_Z30llama_set_embeddings_layer_inpP13llama_contextjb"),
    "llama_get_embeddings_layer_inp": ("llama_get_embeddings_layer_inp",
                                       "_Z30llama_get_embeddings_layer_inpP13llama_contextj"),
    "llama_set_embeddings_nextn": ("llama_set_embeddings_nextn", "_Z26llama_set_embeddings_nextnP13llama_contextbb"),
    "llama_get_embeddings_nextn": ("llama_get_embeddings_nextn", "_Z26llama_get_embeddings_nextnP13llama_context"),
    "llama_get_embeddings_nextn_ith": ("llama_get_embeddings_nextn_ith",
                                       "_Z30llama_get_embeddings_nextn_ithP13llama_contexti"),
    "llama_model_target_layer_ids": ("llama_model_target_layer_ids",
                                     "_Z28llama_model_target_layer_idsPK11llama_model"),
    "llama_model_target_layer_ids_n": ("llama_model_target_layer_ids_n",
                                       "_Z30llama_model_target_layer_ids_nPK11llama_model"),
    FEATURES_SYMBOL: (FEATURES_SYMBOL,),
    TOPK_SYMBOL: (TOPK_SYMBOL,),
    GROW_SYMBOL: (GROW_SYMBOL,),
    KEEP_SYMBOL: (KEEP_SYMBOL,),
    DRAFT_SYMBOL: (DRAFT_SYMBOL,),
    LOG_SYMBOL: (LOG_SYMBOL,),
    LAYER_ROWS_SYMBOL: (LAYER_ROWS_SYMBOL,),
}


def llama_library() -> Any:
    """libllama as llama-cpp-python loaded it (a ctypes.CDLL)."""
    from llama_cpp import llama_cpp

    return llama_cpp._lib


def entry_point(name: str, lib: Any = None) -> Any | None:
    """The ctypes function of one ENTRY_POINTS entry, or None when this build does not export it."""
    lib = llama_library() if lib is None else lib
    for symbol in ENTRY_POINTS[name]:
        fn = getattr(lib, symbol, None)  # a CDLL raises AttributeError for a symbol it lacks
        if fn is not None:
            return fn
    return None


def missing_entry_points(lib: Any = None) -> list[str]:
    """The entry points homespec calls that this build does not export (empty: all there)."""
    lib = llama_library() if lib is None else lib
    return [name for name in ENTRY_POINTS if entry_point(name, lib) is None]


def eagle3_features(lib: Any = None) -> int:
    """The EAGLE-3.1 features of this build's eagle3 graph: a bit set of FC_NORM and NORM_OUTPUT;
    0 for a build without homespec's patch."""
    fn = entry_point(FEATURES_SYMBOL, lib)
    if fn is None:
        return 0
    fn.argtypes = []
    fn.restype = ctypes.c_uint32
    return int(fn())


def runs_eagle31(lib: Any = None) -> bool:
    """Does this build run EAGLE-3.1 heads natively (both features)?"""
    return eagle3_features(lib) & EAGLE31 == EAGLE31


def typed_entry_point(name: str, feature: int, argtypes: list[Any], restype: Any, lib: Any = None) -> Any | None:
    """One of homespec's patch's entry points (ENTRY_POINTS' `name`), typed, where the build reports its
    feature bit; None where it lacks it (no patch, or an older one)."""
    if not eagle3_features(lib) & feature:
        return None
    fn = entry_point(name, lib)
    if fn is not None:
        fn.argtypes, fn.restype = argtypes, restype
    return fn


def keep_path_entry_point(lib: Any = None) -> Any | None:
    """llama_homespec_keep_path: (ctx, seq, p0, p1, tree ids, n, committed ids, n, in_order) -> 0 where it kept
    the path (-4: it could not put it in order, and changed nothing)."""
    i32, p = ctypes.c_int32, ctypes.c_void_p
    return typed_entry_point(KEEP_SYMBOL, KEEP_PATH, [p, i32, i32, i32, p, i32, p, i32, i32], i32, lib)


def layer_rows_entry_point(lib: Any = None) -> Any | None:
    """llama_homespec_layer_rows: (ctx, n_layers, layers, n_rows, rows, out) -> 0 where it copied each row's
    layer inputs into out [n_rows, n_layers * n_embd] (-1, nothing read: a layer with no extracted inputs, a row
    past the buffers' n_batch rows; rows past the last decode's own hold an earlier decode's)."""
    i32, p = ctypes.c_int32, ctypes.c_void_p
    return typed_entry_point(LAYER_ROWS_SYMBOL, LAYER_ROWS, [p, i32, p, i32, p, p], i32, lib)
