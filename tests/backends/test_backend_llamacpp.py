"""The llama.cpp backend: tree verification, commit, rollback and features against plain evaluation.

Real llama.cpp throughout: the embedded SmolLM2-135M Q4_1 GGUF and tiny random-weight GGUFs.
"""

from __future__ import annotations

import ctypes
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from homespec.backends.llamacpp.tree import path_seq, tree_layout
from homespec.backends.settings import BackendSettings, settings_from_plan
from homespec.contracts.tree import check_path
from homespec.errors import FormatError, HomespecError, UsageError

# Branch logits of a multi-sequence batch equal those of a single-sequence batch over the same
# path bit for bit on CPU (same kernels, masked cells contribute exact zeros); allow float noise.
LOGIT_ATOL = 1e-3

# --- pure: tree layout and settings --------------------------------------------------------------


def test_chain_is_one_sequence():
    lay = tree_layout([-1, 0, 1, 2])
    assert lay.depths == (0, 1, 2, 3)
    assert lay.leaves == (3,)
    assert lay.seq_ids == ((0,), (0,), (0,), (0,))


def test_tree_nodes_belong_to_every_path_through_them():
    #      0
    #    1   2
    #   3 4   5
    parents = [-1, 0, 0, 1, 1, 2]
    lay = tree_layout(parents)
    assert lay.depths == (0, 1, 1, 2, 2, 2)
    assert lay.leaves == (3, 4, 5)
    assert lay.seq_ids == ((0, 1, 2), (0, 1), (2,), (0,), (1,), (2,))
    assert path_seq([0, 1], lay) in (0, 1)
    assert path_seq([0, 2, 5], lay) == 2
    check_path([0, 1, 4], parents)
    with pytest.raises(ValueError):
        check_path([0, 2, 4], parents)
    with pytest.raises(ValueError):
        check_path([1], parents)


@pytest.mark.parametrize("parents", [[], [0], [-1, 1], [-1, 0, 3, 1]])
def test_bad_trees_are_rejected(parents):
    with pytest.raises(ValueError):
        tree_layout(parents)


@given(st.integers(1, 30).flatmap(lambda n: st.tuples(*[st.just(-1)] + [st.integers(0, i - 1) for i in range(1, n)])))
@settings(max_examples=150, deadline=None)
def test_tree_layout_follows_the_shared_tree_contract(parents):
    """Depths and leaves are homespec.contracts.tree's; node i belongs to sequence j exactly when
    it lies on the root-to-leaf path of leaf j; the batch order visits parents first."""
    from homespec.contracts import tree as contract

    parents = list(parents)
    lay = tree_layout(parents)
    assert list(lay.depths) == contract.depth_list(parents)
    assert lay.leaves == contract.leaves(parents)
    for seq, leaf in enumerate(lay.leaves):
        on_path = set(contract.path_to(parents, leaf))
        assert {i for i in range(len(parents)) if seq in lay.seq_ids[i]} == on_path
    assert sorted(lay.order) == list(range(len(parents))) and lay.order[0] == 0
    assert all(lay.slot[parents[i]] < lay.slot[i] for i in range(1, len(parents)))
    assert all(list(ids) == sorted(ids) for ids in lay.seq_ids)
    assert tree_layout(parents) is lay  # kept by shape: plain steps and chains recur every step


@pytest.fixture(scope="module")
def cpu_plan():
    """A real plan (the embedded model on a 16 GiB CPU machine, three sequences of 2048 tokens)."""
    from homespec.plan.api import PlanRequest, make_plan

    return make_plan(PlanRequest(gpu="none", ram=16, ctx=2048, kv_type="q8_0", parallel=3, draft="none"))


def test_settings_from_a_plan_hold_every_sequence_and_what_the_run_adds(cpu_plan):
    p = cpu_plan.settings
    s = settings_from_plan(cpu_plan, n_threads=2, load_mtp=True, rollback=3)
    assert s == BackendSettings(n_ctx=3 * 2048, n_gpu_layers=p.n_gpu_layers, n_batch=p.n_batch, n_ubatch=p.n_ubatch,
                                type_k="q8_0", type_v="q8_0", flash_attn=p.flash_attn, n_threads=2, load_mtp=True,
                                rollback=3)
    assert settings_from_plan(cpu_plan).rollback == p.rollback  # left out: the plan's


def test_settings_from_the_planners_settings(cpu_plan):
    plan_settings = pytest.importorskip("homespec.plan.settings")
    planned = plan_settings.Settings(n_ctx=8192, type_k="q8_0", type_v="q8_0", flash_attn=True, n_gpu_layers=31)
    s = settings_from_plan(replace(cpu_plan, settings=planned))
    assert (s.n_ctx, s.type_k, s.type_v, s.flash_attn, s.n_gpu_layers) == (8192, "q8_0", "q8_0", True, 31)
    assert (s.n_batch, s.n_ubatch) == (planned.n_batch, planned.n_ubatch)


def test_quantised_v_cache_without_flash_attention_is_a_usage_error():
    with pytest.raises(UsageError, match="flash attention"):
        BackendSettings(n_ctx=512, type_v="q4_0", flash_attn=False)
    BackendSettings(n_ctx=512, type_v="q4_0", flash_attn=None)  # auto: llama.cpp turns it on
    with pytest.raises(UsageError):
        BackendSettings(n_ctx=512, type_k="q3_k")
    with pytest.raises(UsageError):
        BackendSettings(n_ctx=512, n_batch=64, n_ubatch=128)


def test_planner_and_backend_accept_the_same_kv_types_and_v_cache_rule(cpu_plan):
    """The plan a backend is started with must be a plan it accepts: for every KV type (and a
    bogus one), with flash attention off and on, the planner's check and the backend's agree."""
    from homespec.backends import settings as backend_settings
    from homespec.plan import settings as plan_settings

    assert backend_settings.KV_TYPES is plan_settings.KV_TYPES  # one list, not two copies
    for t in (*plan_settings.KV_TYPES, "q3_k"):
        for fa in (False, True):
            planned = plan_settings.Settings(backend="llamacpp", type_k=t, type_v=t, flash_attn=fa)
            try:
                plan_settings.check_settings(planned)
                plan_ok = True
            except UsageError:
                plan_ok = False
            try:
                settings_from_plan(replace(cpu_plan, settings=planned))
                backend_ok = True
            except UsageError:
                backend_ok = False
            assert plan_ok == backend_ok, (t, fa)


def test_depth_first_batch_order_and_contiguous_prefix():
    from homespec.backends.llamacpp.tree import contiguous_prefix

    parents = [-1, 0, 0, 1, 1, 2]  # BFS numbering, as drafters emit it
    lay = tree_layout(parents)
    assert lay.order == (0, 1, 3, 4, 2, 5)
    assert [lay.order[r] for r in lay.slot] == list(range(6))
    assert contiguous_prefix([0, 1, 3], lay) == 3  # first children all the way: adjacent cells
    assert contiguous_prefix([0, 1, 4], lay) == 2  # node 3's cell sits between 1 and 4
    assert contiguous_prefix([0, 2, 5], lay) == 1


@pytest.mark.parametrize("rows", [
    [(5, 100, (0,), True)],  # a plain step's root
    [(7, 3 + i, (2,), i == 9) for i in range(10)],  # a prompt chunk, logits of its last row
    [(5, 100 + i % 7, tuple(range(i % 5 + 1)), i % 3 == 0) for i in range(48)],  # a tree's rows in several sequences
])
def test_numpy_batch_holds_what_llama_batch_init_holds(rows):
    """The backends' Batch (arrays numpy owns) and llama_batch_init's batch filled row by row
    through ctypes carry the same rows, as llama_decode reads them."""
    llama_cpp = pytest.importorskip("llama_cpp")
    from homespec.backends.llamacpp.batch import Batch, fill_batch

    ref = llama_cpp.llama_batch_init(64, 0, 8)
    ours = Batch(llama_cpp, 64, 8)
    try:
        for _ in range(2):  # a second fill over the first leaves nothing of it
            assert ours.fill(rows) == fill_batch(ref, rows) == sum(r[3] for r in rows)
        b = ours.c
        assert b.n_tokens == ref.n_tokens == len(rows)
        for i, (tok, pos, seqs, want) in enumerate(rows):
            assert (b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i]) == (tok, pos, len(seqs), int(want))
            assert [b.seq_id[i][j] for j in range(len(seqs))] == [ref.seq_id[i][j] for j in range(len(seqs))] == list(seqs)
    finally:
        llama_cpp.llama_batch_free(ref)


def test_numpy_batch_puts_rows_with_their_input_rows():
    """`put` (the draft heads' batches): n rows at once, the ids shared by all or one a row, and an
    input row each (llama_decode copies `embd` row by row); a rows-only batch has no token array."""
    llama_cpp = pytest.importorskip("llama_cpp")
    from homespec.backends.llamacpp.batch import Batch

    ours = Batch(llama_cpp, 16, 5, embd=3)
    g = np.arange(12, dtype=np.float32).reshape(4, 3)
    ours.put(4, token=[7, 8, 9, 10], embd=g, pos=np.arange(20, 24), seq=(1, 3, 4), want=False)
    b = ours.c
    assert b.n_tokens == 4 and [b.token[i] for i in range(4)] == [7, 8, 9, 10]
    assert [b.pos[i] for i in range(4)] == [20, 21, 22, 23] and [b.logits[i] for i in range(4)] == [0] * 4
    assert all([b.seq_id[i][j] for j in range(b.n_seq_id[i])] == [1, 3, 4] for i in range(4))
    assert [b.embd[i] for i in range(12)] == list(range(12))
    ours.put(2, token=[5, 6], embd=g[2:], pos=30, seq=np.array([2, 4]), want=True)  # one id a row, one position
    assert b.n_tokens == 2 and [b.n_seq_id[i] for i in range(2)] == [1, 1]
    assert [b.seq_id[i][0] for i in range(2)] == [2, 4] and [b.pos[i] for i in range(2)] == [30, 30]
    assert [b.embd[i] for i in range(6)] == list(range(6, 12)) and [b.logits[i] for i in range(2)] == [1, 1]
    rows_only = Batch(llama_cpp, 4, 1, embd=6, tokens=False)
    assert not rows_only.c.token and rows_only.c.embd
    with pytest.raises(HomespecError):
        ours.put(17, pos=0, seq=(0,), want=True)


def test_host_rows_views_a_buffer_once_and_again_when_it_moves_or_grows():
    import ctypes

    from homespec.backends.llamacpp.lib import HostRows

    a, b = (ctypes.c_float * 12)(*range(12)), (ctypes.c_float * 12)(*range(100, 112))
    pa, pb = ctypes.addressof(a), ctypes.addressof(b)  # as a getter typed to return an address hands it over
    rows = HostRows(3)
    first = rows.rows_at(pa, 2)
    assert first.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert rows.rows_at(pa, 1).base is first.base  # the same view, not a new one
    a[0] = 50.0
    assert rows.rows_at(pa, 1)[0, 0] == 50.0  # a view of the buffer, read when asked
    assert rows.rows_at(pa, 4).shape == (4, 3)  # grown
    assert rows.rows_at(pb, 1).tolist() == [[100, 101, 102]]  # moved


def test_memory_lines_are_parsed_per_buffer():
    from homespec.backends.llamacpp.lib import parse_buffer_lines, tally_buffers

    lines = [
        "load_tensors:   CPU_Mapped model buffer size =    92.10 MiB",
        "load_tensors:        CUDA0 model buffer size =  4403.49 MiB",
        "llama_context:  CUDA_Host  output buffer size =     0.19 MiB",
        "llama_kv_cache:      CUDA0 KV buffer size =   512.00 MiB",
        "llama_kv_cache:      CUDA0 KV buffer size =    64.00 MiB",  # a second (SWA) cache adds up
        "sched_reserve:      CUDA0 compute buffer size =   300.00 MiB",
        "sched_reserve:      CUDA0 compute buffer size =   258.50 MiB",  # re-reserved: the latest counts
        "sched_reserve:  CUDA_Host compute buffer size =    12.01 MiB",
        "llama_context: n_ctx = 4096",
    ]
    t = tally_buffers(parse_buffer_lines(lines))
    mib = 2**20
    assert t["model"] == {"CPU_Mapped": round(92.10 * mib), "CUDA0": round(4403.49 * mib)}
    assert t["KV"] == {"CUDA0": 576 * mib}
    assert t["compute"] == {"CUDA0": round(258.5 * mib), "CUDA_Host": round(12.01 * mib)}
    assert t["output"] == {"CUDA_Host": round(0.19 * mib)}


# --- llama.cpp ----------------------------------------------------------------------------------

llama_cpp = pytest.importorskip("llama_cpp")

from homespec.backends.llamacpp.backend import LlamaCppBackend  # noqa: E402

# One thread: ggml's worker threads spin-wait, so on a loaded 2-core CI box two threads run ~20x slower.
THREADS = 1
PROMPT_TEXT = "<|im_start|>user\nName three primary colours.<|im_end|>\n<|im_start|>assistant\n"
FEATURE_LAYERS = (0, 2, 15, 27)  # embedding, EAGLE-3's [2, N//2, N-3] for N = 30


@pytest.fixture(scope="module")
def sm(smollm2_path):
    b = LlamaCppBackend(smollm2_path, BackendSettings(n_ctx=512, n_threads=THREADS, n_batch=64, n_ubatch=64))
    b.set_feature_layers(FEATURE_LAYERS)
    yield b
    b.close()


@pytest.fixture(scope="module")
def prompt(sm):
    return sm.tokenizer.encode(PROMPT_TEXT, add_bos=True, special=True)


def _tree_from_model(b, prompt, width=(3, 2, 2, 1), seed=0):
    """Prefill `prompt`; a tree of 1 + 3 + 6 + 12 + 12 = 34 nodes under the model's greedy token."""
    b.reset()
    fwd = b.prefill(prompt)
    root = int(fwd.logits[-1].argmax())
    tokens, parents = [root], [-1]
    frontier = [0]
    rng = np.random.default_rng(seed)
    for w in width:
        nxt = []
        for node in frontier:
            # random ids: verification must be exact whatever the draft proposes
            cands = [int(t) for t in rng.choice(b.n_vocab, size=w, replace=False)]
            for c in cands:
                tokens.append(c)
                parents.append(node)
                nxt.append(len(tokens) - 1)
        frontier = nxt
    return tokens, parents


def _path_to(parents, node):
    path = []
    while node != -1:
        path.append(node)
        node = parents[node]
    return path[::-1]


def test_loads_smollm2_with_its_shape(sm):
    from homespec.contracts.backend import Backend

    assert isinstance(sm, Backend)
    assert (sm.n_layer, sm.hidden_size, sm.n_vocab) == (30, 576, 49152)
    assert sm.max_context >= 512
    assert sm.feature_layers == FEATURE_LAYERS
    assert sm.feature_capture in ("layer_inp", "eval_callback")


@pytest.mark.slow
def test_tree_logits_equal_each_paths_chain_logits(sm, prompt):
    tokens, parents = _tree_from_model(sm, prompt)
    assert len(tokens) >= 24 and len(tree_layout(parents).leaves) > 1
    tree = sm.verify(tokens, parents)
    assert tree.logits.shape == (len(tokens), sm.n_vocab)
    assert tree.features.shape == (len(tokens), len(FEATURE_LAYERS) * sm.hidden_size)
    worst = 0.0
    for node in range(len(tokens)):
        path = _path_to(parents, node)
        chain = sm.verify([tokens[i] for i in path], list(range(-1, len(path) - 1)))  # a one-sequence batch
        worst = max(worst, float(np.abs(tree.logits[node] - chain.logits[-1]).max()))
        feat_diff = np.abs(tree.features[node] - chain.features[-1]).max()
        assert feat_diff <= 1e-3, f"node {node}: features differ by {feat_diff}"
    print(f"max |tree - chain| logit difference over {len(tokens)} nodes: {worst:.3g}")
    assert worst <= LOGIT_ATOL


def test_commit_path_then_decode_equals_feeding_the_path(sm, prompt):
    tokens, parents = _tree_from_model(sm, prompt, seed=1)
    lay = tree_layout(parents)
    # a path that ends inside the tree and does not run through leaf 0's sequence
    deep = lay.leaves[-1]
    path = _path_to(parents, deep)[:-1]
    sm.verify(tokens, parents)
    sm.commit(path)
    assert sm.n_past == len(prompt) + len(path)
    after = sm.verify([1234, 567], [-1, 0])

    sm.reset()
    sm.prefill(prompt)
    sm.prefill([tokens[i] for i in path])
    ref = sm.verify([1234, 567], [-1, 0])
    assert float(np.abs(after.logits - ref.logits).max()) <= LOGIT_ATOL
    assert float(np.abs(after.features - ref.features).max()) <= 1e-3


def test_commit_of_root_only_and_repeated_steps_stay_consistent(sm, prompt):
    sm.reset()
    sm.prefill(prompt)
    emitted = []
    for step in range(4):  # commit root-only, then longer paths, as a speculative loop would
        root = 100 + step
        toks, par = [root, 200, 201, 300], [-1, 0, 0, 1]
        sm.verify(toks, par)
        path = [0] if step % 2 == 0 else [0, 1, 3]
        sm.commit(path)
        emitted += [toks[i] for i in path]
    got = sm.verify([42], [-1]).logits[0]
    sm.reset()
    sm.prefill(prompt + emitted)
    want = sm.verify([42], [-1]).logits[0]
    assert float(np.abs(got - want).max()) <= LOGIT_ATOL


def _committed_under_every_id(be) -> bool:
    """Each tagged id holds exactly the committed positions 0 .. n_past-1; no other id holds any
    cell (a rejected branch left behind would show as a position past n_past - 1)."""
    ll, mem = be._ll, be._mem
    spans = [(ll.llama_memory_seq_pos_min(mem, s), ll.llama_memory_seq_pos_max(mem, s)) for s in range(be._n_seq_max)]
    return all(span == ((0, be.n_past - 1) if s < be._tagged else (-1, -1)) for s, span in enumerate(spans))


def _keeping(be, native: bool):
    """Keep verified paths in one call (homespec's patch: llama_homespec_keep_path) or by seq_rm / seq_cp
    calls from Python; -> what to restore."""
    keep = be._keep_native
    if native and keep is None:
        pytest.skip("this llama.cpp lacks homespec's patch: paths are kept from Python")
    be._keep_native = _Recorded(keep) if native else None
    return keep


class _Recorded:
    """llama_homespec_keep_path, its answers kept: a failed call would fall back to Python unseen."""

    def __init__(self, fn) -> None:
        self.fn, self.codes = fn, []

    def __call__(self, *args):
        self.codes.append(self.fn(*args))
        return self.codes[-1]

    def check(self) -> None:
        assert 0 in self.codes and all(c in (0, -4) for c in self.codes), self.codes  # -4: not put in order


@pytest.mark.parametrize("native", [True, False], ids=["one-call", "python"])
def test_trees_chains_and_cuts_keep_every_id_on_the_committed_cells_alone(sm, prompt, native):
    """Committed cells carry every leaf id between steps (a tree step re-tags only its own cells):
    after trees of several widths, a chain cut short, plain steps and a trim, every id holds the
    committed tokens and nothing else, and decoding goes on as from a fresh prefill of them; so
    whether the kept path is kept in one llama.cpp call or by a call per id."""
    keep = _keeping(sm, native)
    try:
        _trees_chains_and_cuts(sm, prompt)
        if native:
            sm._keep_native.check()
    finally:
        sm._keep_native = keep


def test_the_ids_a_one_call_keep_reads_outlive_a_full_id_cache(sm, prompt, monkeypatch):
    """The tree's and the kept path's id arrays both live through the call when looking up the second
    clears a full cache (it holds 256 sets): freed, the first would be handed out again to the next
    array of its size, and the call would read someone else's ids."""
    keep, commit = _keeping(sm, True), sm.commit

    def full_then_commit(path):  # 255 other sets: the tree's makes 256, the path's clears them
        sm._id_arrays.clear()
        sm._id_arrays.update({(-1, i): None for i in range(255)})
        return commit(path)

    sm._keep_native = _Churned(keep)
    monkeypatch.setattr(sm, "commit", full_then_commit)
    try:
        _trees_chains_and_cuts(sm, prompt)
        sm._keep_native.check()
    finally:
        sm._keep_native = keep
        sm._id_arrays.clear()


class _Churned(_Recorded):
    """_Recorded, which first allocates arrays of the id arrays' sizes filled with -7 (numpy hands a freed
    small buffer out again) and reads the ids at the addresses it was given: all sequence ids."""

    def __call__(self, ctx, seq, p0, p1, tree, n_tree, ids, n_ids, in_order):
        import ctypes

        junk = [np.full(n, -7, np.int32) for n in (n_tree, n_ids) for _ in range(8)]
        read = [list((ctypes.c_int32 * n).from_address(a)) for a, n in ((tree, n_tree), (ids, n_ids))]
        assert all(0 <= s < 64 for got in read for s in got), (read, len(junk))
        return super().__call__(ctx, seq, p0, p1, tree, n_tree, ids, n_ids, in_order)


def _trees_chains_and_cuts(sm, prompt):
    sm.reset()
    sm.prefill(prompt)
    emitted: list[int] = []
    steps = [([100, 200, 201, 300], [-1, 0, 0, 1], [0, 2]),  # a tree of 2 leaves, the second kept
             ([101, 202, 203, 204, 205, 301], [-1, 0, 0, 0, 0, 4], [0, 4, 5]),  # 4 leaves, the last branch
             ([102, 206, 207, 208], [-1, 0, 1, 2], [0, 1]),  # a chain cut after its first draft
             ([103], [-1], [0]),  # a plain step
             ([104, 209, 210], [-1, 0, 0], [0])]  # a tree whose drafts are all rejected
    for toks, par, path in steps:
        sm.verify(toks, par)
        sm.commit(path)
        emitted += [toks[i] for i in path]
        assert _committed_under_every_id(sm)
    assert sm._tagged == 4
    got = sm.verify([42], [-1]).logits[0]
    sm.commit([0])
    assert sm.trim(len(prompt) + 2) and sm._tagged == 1 and _committed_under_every_id(sm)
    sm.reset()
    sm.prefill(prompt + emitted)
    want = sm.verify([42], [-1]).logits[0]
    assert float(np.abs(got - want).max()) <= LOGIT_ATOL


@pytest.mark.parametrize("native", [True, False], ids=["one-call", "python"])
def test_lanes_keep_their_ids_on_their_own_committed_cells(smollm2_path, prompt, native):
    """The same for the lanes of one context (serve): trees and chains on two lanes, their cells
    interleaved in the one cache, each lane's ids hold its committed tokens alone, and a lane's next
    logits equal a fresh prefill's. (The lanes take turns by pass: rows of two lanes in one pass
    round differently, which is the batch's noise, not the ids'.)"""
    from homespec.backends.llamacpp.multi import MultiSeqBackend
    from homespec.contracts.backend import PrefillWork, TreeWork

    be = MultiSeqBackend(smollm2_path, BackendSettings(n_ctx=1024, n_threads=2), lanes=2, lane_ctx=512,
                         leaves_per_lane=4)
    try:
        _keeping(be, native)
        ll, mem = be._ll, be._mem
        be.decode([PrefillWork(0, tuple(prompt), True), PrefillWork(1, tuple(prompt[:9]), True)])
        emitted: list[list[int]] = [[], []]
        steps = [(([100, 200, 201, 300], [-1, 0, 0, 1], [0, 2]), ([110, 210], [-1, 0], [0])),
                 (([101, 202, 203, 204, 205], [-1, 0, 0, 0, 0], [0, 3]), ([111, 211, 212, 213], [-1, 0, 1, 1], [0, 1, 3])),
                 (([102, 206, 207], [-1, 0, 1], [0, 1]), ([112], [-1], [0]))]
        for pair in steps:
            for lane, (t, p, path) in enumerate(pair):
                be.decode([TreeWork(lane, tuple(t), tuple(p))])
                be.commit(lane, path)
                emitted[lane] += [t[i] for i in path]
            for lane in (0, 1):
                base, n_past, tagged = lane * 4, be._lane[lane].n_past, be._lane[lane].tagged
                for j in range(4):
                    span = (ll.llama_memory_seq_pos_min(mem, base + j), ll.llama_memory_seq_pos_max(mem, base + j))
                    assert span == ((0, n_past - 1) if j < tagged else (-1, -1))
        if native:
            be._keep_native.check()
        got = be.decode([TreeWork(1, (42,), (-1,))])[0].logits[0].copy()
        be.commit(1, [0])
        assert be.trim(1, 5) and be._lane[1].tagged == 1
    finally:
        be.close()
    with LlamaCppBackend(smollm2_path, BackendSettings(n_ctx=1024, n_threads=2)) as fresh:
        fresh.prefill(list(prompt[:9]) + emitted[1])
        want = fresh.verify([42], [-1]).logits[0]
    assert float(np.abs(got - want).max()) <= LOGIT_ATOL


def test_a_sliding_window_cache_keeps_recycling_its_cells_after_trees(tmp_path):
    """llama.cpp reuses a cell that slid out of the window only while one id holds it, and its
    sliding-window cache holds the window alone (n_swa x sequences + a batch, 256 cells here): after
    trees the committed cells go back to one id, so plain decoding runs on well past that many
    tokens. (A tree itself tags the whole context while it is verified: past that size a tree fails,
    as it did before the ids were kept; docs/backends.md.)"""
    from tiny_families import make_family_gguf

    path = make_family_gguf(tmp_path / "gemma3.gguf", "gemma3", sliding_window=32)
    with LlamaCppBackend(path, BackendSettings(n_ctx=1024, n_threads=THREADS, n_batch=32, n_ubatch=32),
                         max_leaves=4) as b:
        root = int(np.argmax(b.prefill(list(range(10, 50))).logits[-1]))
        while b.n_past < 600:
            if b.n_past < 150 and b.n_past % 5 == 0:  # trees early on, plain steps between and after
                f = b.verify([root, 11, 12, 13], [-1, 0, 0, 1])
                b.commit([0])
            else:
                f = b.verify([root], [-1])
                b.commit([0])
            root = int(np.argmax(f.logits[0]))
            assert b._tagged == 1


def test_a_viewed_tree_picks_what_its_copied_logits_pick(sm, prompt):
    """verify(view=True) leaves a tree's logits in llama.cpp's buffer in batch order (Forward.rows
    maps the nodes): the greedy picks and the node-ordered logits are the copied verify's."""
    toks, par = [100, 200, 201, 300, 301, 400], [-1, 0, 0, 1, 2, 0]
    sm.reset()
    sm.prefill(prompt)
    want = sm.verify(toks, par)
    sm.reset()
    sm.prefill(prompt)
    got = sm.verify(toks, par, view=True)
    assert got.rows is not None and sorted(got.rows) == list(range(len(toks)))
    assert [got.pick(i) for i in range(len(toks))] == want.logits.argmax(-1).tolist()
    assert float(np.abs(got.node_logits() - want.logits).max()) == 0.0
    if want.features is not None:  # a viewed tree's feature rows are gathered when read, node by node
        assert got.features.shape == want.features.shape
        assert float(np.abs(got.features[list(range(len(toks)))] - want.features).max()) == 0.0
        assert float(np.abs(got.features[[4, 1]] - want.features[[4, 1]]).max()) == 0.0
    chain = sm.verify([100, 200, 300], [-1, 0, 1], view=True)  # a chain is in node order already
    assert chain.rows is None and chain.logits.shape[0] == 3


@pytest.mark.parametrize("gather", ["llama.cpp", "numpy"])
def test_a_viewed_trees_features_are_the_passs_rows(sm, prompt, gather, monkeypatch):
    """A viewed tree's feature rows, gathered when read by homespec's patch in one call (GatheredRows) or
    from a numpy view per layer (FeatureRows, builds without it), are the copied verify's rows, node for
    node, in any order and with repeats; a row the pass did not have is refused, not read."""
    from homespec.backends.llamacpp.features import FeatureRows, GatheredRows

    cap = sm._capture
    if gather == "numpy":
        monkeypatch.setattr(cap, "_gather", None)
    elif cap._gather is None:
        pytest.skip("this build lacks llama_homespec_layer_rows")
    toks, par = [100, 200, 201, 300, 301, 400, 401], [-1, 0, 0, 1, 2, 0, 5]
    sm.reset()
    sm.prefill(prompt)
    want = sm.verify(toks, par).features
    sm.reset()
    sm.prefill(prompt)
    got = sm.verify(toks, par, view=True).features
    assert isinstance(got, GatheredRows if gather == "llama.cpp" else FeatureRows)
    assert got.shape == want.shape == (len(toks), len(FEATURE_LAYERS) * sm.hidden_size)
    for nodes in ([0, 1, 3], [6, 5, 0], [2, 2], list(range(len(toks))), []):
        assert np.array_equal(got[nodes], want[nodes])
    if gather == "llama.cpp":
        with pytest.raises(HomespecError, match="layer_rows"):
            cap.gather([1, 1 << 30])  # a row past the batch
        monkeypatch.setattr(cap, "_layer_ids", (ctypes.c_int32 * 1)(sm.n_layer - 1))
        with pytest.raises(HomespecError, match="layer_rows"):
            cap.gather([0])  # a layer not extracted
        cap._set(cap.ctx, sm.n_layer - 1, True)  # turned on since the last decode: no buffer yet (llama.cpp's
        try:  # own getter aborts the process there)
            with pytest.raises(HomespecError, match="layer_rows"):
                cap.gather([0])
        finally:
            cap._set(cap.ctx, sm.n_layer - 1, False)


def test_rollback_restores_logits(sm, prompt):
    sm.reset()
    first = sm.prefill(prompt)
    sm.prefill([11, 12, 13, 14])
    sm.rollback(4)
    assert sm.n_past == len(prompt)
    again = sm.verify([int(first.logits[-1].argmax())], [-1])
    sm.reset()
    sm.prefill(prompt)
    ref = sm.verify([int(first.logits[-1].argmax())], [-1])
    assert np.array_equal(again.logits, ref.logits)
    with pytest.raises(ValueError):
        sm.rollback(sm.n_past + 1)


def test_contract_violations_raise_the_same_types_as_every_backend(sm, prompt):
    """A malformed tree was a ValueError here and a HomespecError on the torch backend."""
    from backend_contract import check_contract_errors

    check_contract_errors(sm, prompt)


def test_uncommitted_tree_is_dropped_by_the_next_pass(sm, prompt):
    sm.reset()
    sm.prefill(prompt)
    sm.verify([5, 6, 7], [-1, 0, 0])
    sm.verify([5, 6, 7], [-1, 0, 0])  # again, without commit
    sm.prefill([5])
    got = sm.verify([6], [-1]).logits
    sm.reset()
    sm.prefill(prompt + [5])
    assert float(np.abs(got - sm.verify([6], [-1]).logits).max()) <= LOGIT_ATOL


def test_exact_mode_matches_plain_one_token_decoding(sm, prompt):
    """Greedy chain: exact verification gives the very logits of one-token decoding."""
    sm.reset()
    tok = int(sm.prefill(prompt).logits[-1].argmax())
    plain = []
    for _ in range(6):
        out = sm.verify([tok], [-1])
        plain.append(out.logits[0])
        sm.commit([0])
        tok = int(out.logits[0].argmax())
    greedy = [int(x.argmax()) for x in plain]
    sm.reset()
    first = int(sm.prefill(prompt).logits[-1].argmax())
    chain = [first] + greedy[:-1]
    sm.verify_mode = "exact"
    try:
        ex = sm.verify(chain, list(range(-1, len(chain) - 1)))
    finally:
        sm.verify_mode = "batch"
    for i in range(len(chain)):
        assert np.array_equal(ex.logits[i], plain[i]), f"node {i}"


def test_cpu_flash_attention_batch_verify_is_bit_identical_to_one_token_decoding(sm, prompt):
    """llama.cpp's CPU flash-attention kernel treats each query row alone and the quantised
    matmuls are per row too, so a batch gives the one-token path's very numbers (measured: 0
    argmax flips in 940 tokens; without flash attention 18, docs/backends.md)."""
    assert sm.flash_attn_active  # auto turns it on for the CPU
    sm.reset()
    tok = int(sm.prefill(prompt).logits[-1].argmax())
    toks, plain = [tok], []
    for _ in range(12):
        logits = sm.verify([tok], [-1]).logits[0]
        sm.commit([0])
        plain.append(logits)
        tok = int(logits.argmax())
        toks.append(tok)
    sm.reset()
    sm.prefill(prompt)
    batch = sm.verify(toks[:-1], list(range(-1, len(toks) - 2))).logits
    assert np.array_equal(batch, np.stack(plain))


def test_score_is_teacher_forcing_over_one_pass(smollm2_path, prompt):
    """score(prompt + output) gives every position's logits from one llama_decode call. With
    flash attention on the CPU and micro-batches under 64 rows (llama.cpp switches to a tiled
    attention kernel at 64 query rows, docs/backends.md) they equal the prefill's last row and
    then the one-token decode path bit for bit: a teacher-forcing scorer with no noise of its own."""
    with LlamaCppBackend(smollm2_path, BackendSettings(n_ctx=256, n_threads=THREADS, n_batch=128, n_ubatch=32)) as b:
        assert b.flash_attn_active
        logits = b.prefill(prompt).logits[-1]
        rows, toks = [logits], []
        for _ in range(90 - len(prompt)):
            tok = int(rows[-1].argmax())
            toks.append(tok)
            rows.append(b.verify([tok], [-1]).logits[0])
            b.commit([0])
        scored = b.score(prompt + toks)
        assert b.n_past == len(prompt) + len(toks)
        assert scored.shape == (len(prompt) + len(toks), b.n_vocab)
        assert np.array_equal(scored[len(prompt) - 1 :], np.stack(rows))
        with pytest.raises(HomespecError):
            b.score([])


def test_a_batch_smaller_than_the_leaf_count_caps_the_tree_instead_of_aborting(smollm2_path, prompt):
    """llama.cpp aborts the process when n_seq_max > n_batch; the backend caps the leaves."""
    with LlamaCppBackend(smollm2_path, BackendSettings(n_ctx=256, n_threads=THREADS, n_batch=8, n_ubatch=8)) as b:
        b.prefill(prompt)
        b.verify([1, 2, 3], [-1, 0, 0])
        with pytest.raises(UsageError, match="at most 8"):
            b.verify(list(range(10)), [-1] + [0] * 9)


@pytest.mark.slow
def test_both_feature_captures_agree_and_layer0_is_the_embedding(smollm2_path, sm, prompt):
    sm.reset()
    a = sm.prefill(prompt).features
    other = LlamaCppBackend(smollm2_path, BackendSettings(n_ctx=256, n_threads=THREADS, n_batch=64, n_ubatch=64), feature_capture="eval_callback")
    try:
        other.set_feature_layers(FEATURE_LAYERS)
        assert other.feature_capture == "eval_callback"
        b = other.prefill(prompt).features
    finally:
        other.close()
    assert a.shape == b.shape == (len(prompt), len(FEATURE_LAYERS) * 576)
    assert np.array_equal(a, b)
    emb = sm.token_embeddings()[prompt]  # llama.cpp's inp_embd rows, kept in fp16 on the host
    assert emb.dtype == np.float16 and np.array_equal(a[:, :576].astype(np.float16), emb)


def test_no_feature_layers_means_no_features(smollm2_path):
    with LlamaCppBackend(smollm2_path, BackendSettings(n_ctx=128, n_threads=THREADS)) as b:
        out = b.prefill([1, 2, 3])
        assert out.features is None
        assert out.logits.shape == (1, b.n_vocab)


def test_a_load_reads_its_memory_report_after_another_logger_took_over(sm, smollm2_path):
    """Whatever else sets llama.cpp's one global logger after homespec's first load (`sm`: llama-cpp-python's
    `Llama`, another binding) does not blind the next load: its buffer lines, the memory report, still
    reach homespec."""
    import ctypes

    import llama_cpp

    seen: list[bytes] = []
    other = llama_cpp.llama_log_callback(lambda level, text, user: seen.append(text))
    llama_cpp.llama_log_set(other, ctypes.c_void_p(0))
    with LlamaCppBackend(smollm2_path, BackendSettings(n_ctx=128, n_threads=THREADS)) as b:
        r = b.memory_report()
    assert abs(r.weights_bytes - 92.10 * 2**20) < 0.01 * 2**20 and r.kv_bytes > 0 and r.compute_bytes > 0
    assert not seen  # the load's lines went to homespec's router, not to the logger it displaced


def test_memory_report_matches_llama_cpp_log(sm):
    r = sm.memory_report()
    assert r.device == "CPU"
    # facts: SmolLM2-135M Q4_1 model buffer 92.10 MiB; KV = 2 x 30 layers x 3 kv heads x 64 x 2 B x n_ctx
    assert abs(r.weights_bytes - 92.10 * 2**20) < 0.01 * 2**20
    assert r.kv_bytes == 2 * 30 * 3 * 64 * 2 * sm.max_context
    assert r.compute_bytes > 0
    assert r.total_bytes == r.weights_bytes + r.kv_bytes + r.compute_bytes


@pytest.mark.slow
def test_prefill_longer_than_one_batch(sm, prompt):
    long = (prompt * 12)[:150]  # > n_batch 64: llama_decode calls of 64, 64 and 22 tokens
    sm.reset()
    out = sm.prefill(long)
    assert out.features.shape[0] == 150
    sm.reset()
    parts = [sm.prefill(long[i : i + 64]) for i in range(0, 150, 64)]
    assert np.array_equal(out.logits, parts[-1].logits)
    assert np.array_equal(out.features, np.concatenate([p.features for p in parts]))


# --- errors ---------------------------------------------------------------------------------------


def test_missing_file(tmp_path):
    with pytest.raises(HomespecError, match="not found"):
        LlamaCppBackend(tmp_path / "nope.gguf", BackendSettings(n_ctx=128, n_threads=THREADS))


def test_corrupt_file_says_which_file_and_why(tmp_path, smollm2_path):
    bad = tmp_path / "truncated.gguf"
    bad.write_bytes(Path(smollm2_path).read_bytes()[: 1 << 20])
    with pytest.raises(FormatError) as e:
        LlamaCppBackend(bad, BackendSettings(n_ctx=128, n_threads=THREADS))
    assert str(bad) in e.value.message
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf at all" * 100)
    with pytest.raises(FormatError, match="junk.gguf"):
        LlamaCppBackend(junk, BackendSettings(n_ctx=128, n_threads=THREADS))


@pytest.mark.slow
def test_context_overflow_is_caught_before_decode(smollm2_path):
    with LlamaCppBackend(smollm2_path, BackendSettings(n_ctx=256, n_threads=THREADS, n_batch=256, n_ubatch=256)) as b:
        b.prefill(list(range(1000, 1000 + b.max_context - 2)))
        with pytest.raises(HomespecError, match="context full"):
            b.verify([1, 2, 3], [-1, 0, 1])
        b.verify([1, 2], [-1, 0])  # exactly fits


def test_quantised_v_cache_with_flash_attention_off_is_refused(smollm2_path):
    with pytest.raises(UsageError, match="flash attention"):
        LlamaCppBackend(smollm2_path, BackendSettings(n_ctx=128, n_threads=THREADS, type_k="q8_0", type_v="q8_0", flash_attn=False))


def test_quantised_kv_cache_runs_with_flash_attention(smollm2_path):
    with LlamaCppBackend(smollm2_path, BackendSettings(n_ctx=256, n_threads=THREADS, type_k="q8_0", type_v="q8_0")) as b:
        out = b.prefill([1, 2, 3, 4])
        assert np.isfinite(out.logits).all()
        # q8_0: 34 bytes per 32 values; llama.cpp prints MiB with two decimals (+-0.005 MiB)
        assert abs(b.memory_report().kv_bytes - 2 * 30 * 3 * 64 * 34 * b.max_context // 32) <= 0.005 * 2**20


def test_too_many_leaves(smollm2_path):
    with LlamaCppBackend(smollm2_path, BackendSettings(n_ctx=128, n_threads=THREADS), max_leaves=2) as b:
        b.prefill([1, 2])
        with pytest.raises(UsageError, match="leaves"):
            b.verify([1, 2, 3, 4], [-1, 0, 0, 0])



# Each combination loads and verifies in a child process: llama.cpp asserts abort the process, and an
# abort must show up as a failed exit code, not take the test run with it.
_SIZES_CHILD = """
import json, sys
from homespec.backends.llamacpp.backend import LlamaCppBackend
from homespec.backends.settings import BackendSettings
from homespec.errors import HomespecError
path = sys.argv[1]
for combo in sys.argv[2:]:
    ctx, nb, nub, leaves = map(int, combo.split(","))
    with LlamaCppBackend(path, BackendSettings(n_ctx=ctx, n_batch=nb, n_ubatch=nub, n_threads=1), max_leaves=leaves) as b:
        b.prefill([1])
        got = {}
        for w in sorted({1, leaves, leaves + 1, ctx - 2, ctx - 1, nb, nb + 1} & set(range(1, 300))):
            try:
                b.verify([2] * (w + 1), [-1] + [0] * w)  # a root with w leaves under it
                got[w] = "ok"
            except HomespecError as e:
                got[w] = e.message
        print(json.dumps({"combo": combo, "max_context": b.max_context, "widths": got}), flush=True)
"""


def test_small_contexts_batches_and_leaf_counts_never_reach_a_llama_cpp_assert(tmp_path):
    """llama.cpp clamps n_batch to n_ctx and aborts (GGML_ASSERT) when n_seq_max exceeds it: a
    context of 32 with the default 64 leaves took `homespec generate --ctx 32` down. Across small
    contexts, batches, ubatches and leaf counts, a load always succeeds, a tree of up to
    min(max_leaves, n_ctx, n_batch) leaves that fits the context verifies, and a wider or longer
    one is refused with a HomespecError."""
    import json
    import os
    import subprocess
    import sys

    from tiny_models import make_tiny_gguf

    path = make_tiny_gguf(tmp_path / "tiny.gguf", n_layer=1, n_embd=32, n_head=2, n_head_kv=1, n_ff=64)
    combos = [(1, 512, 512, 2), (2, 16, 16, 3), (8, 4, 1, 5), (32, 512, 512, 64), (33, 512, 2, 34),
              (40, 16, 16, 17), (300, 16, 1, 256), (64, 64, 1, 64)]
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2]))
    r = subprocess.run([sys.executable, "-c", _SIZES_CHILD, str(path), *(",".join(map(str, c)) for c in combos)],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, f"exit {r.returncode}: " + (r.stdout + r.stderr)[-1500:]
    rows = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert [row["combo"] for row in rows] == [",".join(map(str, c)) for c in combos]
    for (ctx, nb, _, leaves), row in zip(combos, rows):
        assert row["max_context"] == ctx  # the context asked for, not llama.cpp's 256-cell padding
        cap = min(leaves, ctx, nb)
        for w, got in row["widths"].items():
            w = int(w)
            if w <= cap and w + 2 <= ctx:
                assert got == "ok", (row["combo"], w, got)
            else:
                assert "leaves" in got or "context full" in got, (row["combo"], w, got)


# --- against the torch reference model --------------------------------------------------------------


def _torch_reference(path, tokens, layers):
    torch = pytest.importorskip("torch")
    from homespec.nets.load import load_model

    model = load_model(str(path), device="cpu", dtype="float32", max_context=256)
    out = model.forward(torch.tensor(tokens), capture=layers)
    return out.logits.numpy(), out.features.numpy()  # [T, V], [T, k*H]


def _rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.mark.slow
@pytest.mark.parametrize("flash_attn, tol", [(False, 1e-5), (True, 2e-3)])
def test_features_and_logits_match_torch_on_a_tiny_f32_model(tmp_path, flash_attn, tol):
    """F32 weights and an f32 KV cache: without flash attention llama.cpp computes in f32 like
    the reference (measured ~5e-7 relative); its CPU flash-attention kernel rounds Q and the
    V accumulator to f16 (measured ~6e-4)."""
    from tiny_models import make_tiny_gguf

    path = make_tiny_gguf(tmp_path / "tiny.gguf", n_layer=4, n_embd=64, n_head=4, n_head_kv=2, n_ff=128, seed=3)
    tokens = [1, 450, 3203, 17, 9, 1000, 42, 7]
    layers = (0, 1, 3)
    with LlamaCppBackend(path, BackendSettings(n_ctx=256, n_threads=THREADS, type_k="f32", type_v="f32", flash_attn=flash_attn)) as b:
        b.set_feature_layers(layers)
        got = b.prefill(tokens)
        tree = b.verify([5, 6, 7], [-1, 0, 0])
    ref_logits, ref_feats = _torch_reference(path, tokens + [5, 6], layers)
    n = len(tokens)
    feat_err = _rel(got.features, ref_feats[:n])
    logit_err = _rel(got.logits[0], ref_logits[n - 1])
    tree_err = _rel(tree.logits[:2], ref_logits[n:])
    print(f"tiny f32 vs torch (flash_attn={flash_attn}), relative: features {feat_err:.1e}, "
          f"logits {logit_err:.1e}, tree logits {tree_err:.1e}")
    assert np.array_equal(got.features[:, :64], ref_feats[:n, :64])  # layer 0: the embedding rows
    assert feat_err < tol and logit_err < tol and tree_err < tol


@pytest.mark.slow
def test_smollm2_features_match_torch_within_quantisation_noise(sm, prompt, smollm2_path):
    """llama.cpp multiplies Q4_1 weights with activations quantised to Q8_1 and keeps K/V in f16;
    the torch reference uses the same dequantised weights in f32. Compare per layer, relative."""
    sm.reset()
    got = sm.prefill(prompt)
    ref_logits, ref_feats = _torch_reference(smollm2_path, prompt, FEATURE_LAYERS)
    H = sm.hidden_size
    errs = []
    for j, layer in enumerate(FEATURE_LAYERS):
        a, r = got.features[:, j * H : (j + 1) * H], ref_feats[:, j * H : (j + 1) * H]
        errs.append(_rel(a, r))
    logit_rel = _rel(got.logits[0], ref_logits[-1])
    print(f"SmolLM2 Q4_1 llama.cpp vs torch, relative error per layer {dict(zip(FEATURE_LAYERS, errs))}, logits {logit_rel:.3g}")
    assert errs[0] == 0.0  # the embedding rows are dequantised identically
    assert max(errs) < 0.05 and logit_rel < 0.05
    assert int(got.logits[0].argmax()) == int(ref_logits[-1].argmax())


@pytest.mark.parametrize("native", [True, False], ids=["moved", "decoded-again"])
def test_exact_mode_tree_commit_off_the_first_branch_matches_plain_decoding(sm, prompt, native):
    """Exact mode + a path through a later child: the tail is moved into the hole in cell order
    (homespec's patch: its K and V rows) or decoded again there, so later logits are exactly plain
    one-token decoding's."""
    if native and not sm.flash_attn_active:
        pytest.skip("without flash attention llama.cpp stores values transposed: the cells are not moved")
    keep = _keeping(sm, native)
    try:
        _off_the_first_branch(sm, prompt, moved=native)
    finally:
        sm._keep_native = keep


def _off_the_first_branch(sm, prompt, *, moved: bool):
    sm.reset()
    first = int(sm.prefill(prompt).logits[-1].argmax())
    plain = [first]
    for _ in range(3):
        out = sm.verify([plain[-1]], [-1])
        sm.commit([0])
        plain.append(int(out.logits[0].argmax()))
    probe = sm.verify([plain[-1]], [-1]).logits[0]

    sm.reset()
    sm.prefill(prompt)
    sm.verify_mode = "exact"
    try:
        # root, a decoy first child with its own child, then the greedy continuation as the second child
        tokens = [plain[0], 77, 78, plain[1], plain[2]]
        parents = [-1, 0, 1, 0, 3]
        sm.verify(tokens, parents)
        repairs = sm.order_repairs
        sm.commit([0, 3, 4])
        assert sm.order_repairs == repairs + (0 if moved else 1)
        got = sm.verify([plain[3]], [-1]).logits[0]
    finally:
        sm.verify_mode = "batch"
    assert np.array_equal(got, probe)


@pytest.mark.gpu
def test_gpu_offload_reports_device_buffers_and_keeps_tree_exactness(smollm2_path, prompt):
    if not llama_cpp.llama_supports_gpu_offload():
        pytest.skip("this llama-cpp-python build has no GPU backend (HOMESPEC_LLAMA_BUILD=cuda)")
    with LlamaCppBackend(smollm2_path, BackendSettings(n_ctx=512, n_gpu_layers=-1)) as b:
        r = b.memory_report()
        assert r.device != "CPU" and r.kv_bytes > 0
        tokens, parents = _tree_from_model(b, prompt)
        tree = b.verify(tokens, parents)
        for node in (5, len(tokens) - 1):
            path = _path_to(parents, node)
            chain = b.verify([tokens[i] for i in path], list(range(-1, len(path) - 1)))
            assert float(np.abs(tree.logits[node] - chain.logits[-1]).max()) <= 1e-2


@pytest.mark.slow
def test_greedy_speculation_through_the_loop_emits_plain_greedy_tokens(smollm2_path, sm, prompt):
    """The contract that matters: a draft-model tree drafter (here SmolLM2 drafting for itself,
    top-2 trees, so later-child paths and cell-order repairs happen) emits exactly plain greedy."""
    from homespec.engine.run import decode
    from homespec.speculative.drafters.draft_model import DraftModelDrafter
    from homespec.speculative.steps import Limits

    def emitted(drafter):
        sm.reset()
        steps = list(decode(sm, drafter, prompt, limits=Limits(max_tokens=40)))
        return [t for s in steps for t in s.tokens], sum(s.accepted for s in steps)

    plain, _ = emitted(None)
    with LlamaCppBackend(smollm2_path, BackendSettings(n_ctx=512, n_threads=THREADS)) as draft:
        spec, accepted = emitted(DraftModelDrafter(draft, depth=4, topk=2, total=9))
    assert accepted > 0
    assert spec == plain


@pytest.mark.parametrize("ftype", ["F32", "F16", "Q8_0"])
def test_token_embd_reads_the_table_gguf_reads(tmp_path, ftype):
    """The draft's fp16 embedding table, found with homespec's own header reader and mapped alone,
    holds exactly what gguf.GGUFReader dequantises (any tensor position and type)."""
    import gguf
    from gguf.quants import dequantize

    from homespec.backends.llamacpp.load import token_embd
    from tiny_models import make_tiny_gguf

    path = make_tiny_gguf(tmp_path / "tiny.gguf", n_layer=2, tied=False, ftype=ftype, seed=5)
    ref = next(t for t in gguf.GGUFReader(str(path)).tensors if t.name == "token_embd.weight")
    want = np.array(dequantize(ref.data, ref.tensor_type), dtype=np.float32).astype(np.float16)
    got = token_embd(str(path), rows_per_chunk=7)  # chunks that do not divide the vocabulary
    assert got.dtype == np.float16 and got.shape == want.shape and np.array_equal(got, want)
