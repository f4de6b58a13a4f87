"""Rejected drafts given back by a recurrent state (backends/llamacpp/rollback.py), on tiny random-weight
hybrids llama.cpp runs as it runs Qwen3.5 and Qwen3-Next (tests/tiny_families.py):

* qwen35moe: llama.cpp keeps per-token snapshots of its state (n_rs_seq): "native";
* qwen3next: it has none: the state is saved on the device before a chain and restored, and the
  accepted tokens decoded again: "replay".

After a chain whose tail is rejected, the sequence's recurrent state is the one a fresh prefill of the
same tokens reaches (the prompt, then the kept tokens as one chunk): byte for byte under replay (the same
kernels run the same tokens), within float rounding under native (the snapshot was written inside the
chain's pass, a chunked scan whose sums round differently), and so are the logits that follow; one lane
and several.
"""

from __future__ import annotations

import numpy as np
import pytest

MODES = {"qwen35moe": "native", "qwen3next": "replay"}


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory):
    from tiny_families import make_family_gguf

    root = tmp_path_factory.mktemp("hybrids")
    return {f: str(make_family_gguf(root / f"{f}.gguf", f)) for f in MODES}


def _one(path, rollback=6):
    from homespec.backends.llamacpp.backend import LlamaCppBackend
    from homespec.backends.settings import BackendSettings

    return LlamaCppBackend(path, BackendSettings(n_ctx=256, n_threads=2, rollback=rollback), max_leaves=1)


def _state(backend, seq=0) -> np.ndarray:
    """The sequence's recurrent state as llama.cpp writes it (its f32 rows after a small header)."""
    from homespec.backends.llamacpp import state

    return np.frombuffer(state.read(backend, seq, partial=True), np.uint8)


def _fresh(path, prompt, kept):
    """A fresh backend's state after prefilling `prompt`, then `kept` in one chunk."""
    be = _one(path, rollback=0)
    be.prefill(prompt)
    if kept:
        be.prefill(kept)
    return be, _state(be)


PROMPT = list(range(100, 140))
ROOT, DRAFT = 7, [8, 9, 10, 11]


def _close(a: np.ndarray, b: np.ndarray, exact: bool) -> bool:
    if exact:
        return a.tobytes() == b.tobytes()
    fa, fb = a[8:].view(np.float32), b[8:].view(np.float32)  # past llama.cpp's cell header
    return a.size == b.size and np.allclose(fa, fb, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("family", list(MODES))
@pytest.mark.parametrize("kept", [1, 2, 4])
def test_a_rejected_tail_leaves_the_state_a_fresh_prefill_reaches(hybrid, family, kept):
    path = hybrid[family]
    be = _one(path)
    assert be.recurrent and be.rollback_mode == MODES[family]
    be.prefill(PROMPT)
    chain = [ROOT, *DRAFT]
    be.verify(chain, list(range(-1, len(chain) - 1)))
    be.commit(list(range(kept)))  # the root and kept - 1 drafts accepted, the rest given back
    assert be.n_past == len(PROMPT) + kept
    ref, want = _fresh(path, PROMPT, chain[:kept])
    exact = MODES[family] == "replay"
    assert _close(_state(be), want, exact)
    a, b = be.verify([42], [-1]).logits, ref.verify([42], [-1]).logits  # and what comes next
    assert (a == b).all() if exact else np.allclose(a, b, atol=1e-4)
    be.close()
    ref.close()


def test_a_chain_verified_and_never_committed_is_given_back_whole_under_replay(hybrid):
    path = hybrid["qwen3next"]
    be = _one(path)
    be.prefill(PROMPT)
    be.verify([ROOT, *DRAFT], [-1, 0, 1, 2, 3])
    be.prefill([ROOT])  # a new prefill discards the pending chain first
    ref, want = _fresh(path, PROMPT, [ROOT])
    assert _close(_state(be), want, exact=True)
    be.close()
    ref.close()


def test_under_native_snapshots_a_chain_never_committed_empties_the_sequence_and_says_so(hybrid):
    """llama.cpp's snapshots reach back to the chain's first token, not before it."""
    from homespec.errors import HomespecError

    be = _one(hybrid["qwen35moe"])
    be.prefill(PROMPT)
    be.verify([ROOT, *DRAFT], [-1, 0, 1, 2, 3])
    with pytest.raises(HomespecError, match="emptied"):
        be.prefill([ROOT])
    assert be.n_past == 0 and be._ll.llama_memory_seq_pos_max(be._mem, 0) == -1
    be.close()


def test_a_chain_longer_than_the_snapshots_falls_back_to_replay(hybrid):
    path = hybrid["qwen35moe"]
    be = _one(path, rollback=2)  # snapshots for 2 draft tokens, a chain of 4
    assert be.rollback_mode == "native"
    be.prefill(PROMPT)
    be.verify([ROOT, *DRAFT], [-1, 0, 1, 2, 3])
    be.commit([0, 1])
    ref, want = _fresh(path, PROMPT, [ROOT, DRAFT[0]])
    assert _close(_state(be), want, exact=True)  # restored and replayed: the fresh prefill's own bytes
    be.close()
    ref.close()


@pytest.mark.parametrize("family", list(MODES))
def test_the_state_without_the_rejected_tokens_differs_from_the_one_with_them(hybrid, family):
    """The check has teeth: keeping the rejected tokens is a different state."""
    path = hybrid[family]
    ref, kept = _fresh(path, PROMPT, [ROOT])
    other, more = _fresh(path, PROMPT, [ROOT, *DRAFT])
    assert not _close(kept, more, exact=False)
    ref.close()
    other.close()


def test_a_tree_on_a_recurrent_state_is_refused(hybrid):
    from homespec.errors import UsageError

    be = _one(hybrid["qwen35moe"])
    be.prefill(PROMPT)
    with pytest.raises(UsageError, match="verifies draft chains"):
        be.verify([ROOT, 8, 9], [-1, 0, 0])
    be.close()


@pytest.mark.parametrize("family", list(MODES))
def test_lanes_give_back_their_own_tokens(hybrid, family):
    """Two lanes in one context, verified in one pass: each keeps its own prefix, and each lane's state
    is the one it reaches alone (within rounding)."""
    from homespec.backends.llamacpp.multi import MultiSeqBackend
    from homespec.backends.settings import BackendSettings
    from homespec.contracts.backend import PrefillWork, TreeWork

    path = hybrid[family]
    be = MultiSeqBackend(path, BackendSettings(n_ctx=512, n_threads=2, rollback=6), lanes=2, lane_ctx=256)
    prompts = [PROMPT, list(range(300, 330))]
    be.decode([PrefillWork(i, tuple(p), True) for i, p in enumerate(prompts)])
    chains = [(ROOT, *DRAFT), (5, 6, 7)]
    be.decode([TreeWork(i, c, tuple(range(-1, len(c) - 1))) for i, c in enumerate(chains)])
    be.commit(0, [0, 1])
    be.commit(1, [0])
    for lane, (p, c, k) in enumerate(zip(prompts, chains, (2, 1))):
        alone, _ = _fresh(path, p, list(c[:k]))
        assert be.n_past(lane) == len(p) + k
        # lanes share passes whose split into micro-batches differs from a lone prefill's: rounding apart
        assert _close(_state(be, be._base(lane)), _state(alone), exact=False), lane
        alone.close()
    be.close()
