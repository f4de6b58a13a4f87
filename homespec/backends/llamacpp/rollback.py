"""Giving rejected draft tokens back where the model keeps a recurrent state.

A hybrid model (Qwen3.5/3.6, Qwen3-Next, Nemotron-H, Jamba ...) keeps, beside its attention KV, one
recurrent state per sequence (Gated DeltaNet / Mamba layers) that folds in every token it is given. A
verified draft chain is in that state whether the verifier accepts it or not, and the state holds no
per-position cells that llama_memory_seq_rm could cut, as it cuts the attention KV. homespec gives the
rejected tokens back the two ways llama-server does (tools/server/server-context.cpp, its speculative
step: `use_ckpt_tgt`, `COMMON_CONTEXT_SEQ_RM_TYPE_RS` / `_FULL` from common/common.cpp
`common_context_can_seq_rm`):

* **native** — where llama.cpp keeps per-token snapshots of the state (`llm_arch_supports_rs_rollback`,
  src/llama-arch.cpp: Qwen3.5 and 3.5-MoE, Nemotron-H, LFM2, DeepSeek-V4, ...): the context is created
  with `n_rs_seq` = the most draft tokens a step verifies (common/common.h `need_n_rs_seq`: the draft
  length), the verifying pass writes the state after each of its last n_rs_seq + 1 tokens (the
  recurrent tensors hold 1 + n_rs_seq row groups per sequence; src/models/delta-net-base.cpp
  `build_recurrent_attn`, "op writes the last min(n_seq_tokens, K) snapshots"), and
  `llama_memory_seq_rm(seq, n_past + k, -1)` selects the one k tokens in (src/llama-memory-recurrent.cpp
  `seq_rm`, "partial rollback via per-token snapshot index"): nothing is copied or decoded again. The
  state from before the chain's first token is not among them: the root is always kept (llama-server
  never gives back more than the draft, `n_rollback`), and a chain longer than n_rs_seq + 1 (a lookup's,
  beside a shorter model drafter) is verified under replay;
* **replay** — elsewhere (Qwen3-Next, Jamba, Mamba, Falcon-H1 ...): before a chain is verified the
  sequence's recurrent state is saved (`llama_state_seq_get_data_ext`, PARTIAL_ONLY: the recurrent part
  alone; ON_DEVICE: the data stays in a device buffer, never crossing to the host), and after a partial
  acceptance it is restored, the attention KV cut back to the chain's start, and the accepted tokens
  decoded again (server-context.cpp: the speculative checkpoint `spec_ckpt` and `spec_is_replay`).
  llama-server keeps its checkpoint in host memory; the device buffer is the same data without the copy.

A draft *tree* cannot be verified against a recurrent state: a state cell belongs to one sequence, and
llama.cpp drops a row's other sequence ids (llama_memory_recurrent::find_slot). So a recurrent target
verifies chains (homespec.engine.assemble turns its drafters' trees into chains).

Functions over a LlamaCppCore (`owner._ll`, `_ctx`, `_mem`, `_decode_rows`, `rollback_mode`); sequence
ids are llama.cpp's.
"""

from __future__ import annotations

from typing import Any, Sequence

from homespec.backends.llamacpp import state
from homespec.errors import HomespecError, UsageError

NATIVE = "native"
REPLAY = "replay"


def rollback_mode(owner: Any, exact: bool = False) -> str | None:
    """How `owner` gives back rejected tokens: None (no recurrent state: llama_memory_seq_rm cuts the
    KV anywhere), NATIVE (llama.cpp kept n_rs_seq snapshots: the context has them) or REPLAY. `exact`:
    the verifier decodes one token per pass, and a snapshot is good only inside the pass that wrote it
    (the trailing n_rs_seq + 1 tokens of a sequence stay in one ubatch for that, llama-memory-recurrent.cpp
    init_batch), so only replay undoes several passes."""
    if not owner.recurrent:
        return None
    if owner._ll.llama_n_rs_seq(owner._ctx) > 0 and not exact:
        return NATIVE
    return REPLAY


def check_chain(owner: Any, n_seq: int) -> None:
    """A recurrent target verifies chains only (module docstring)."""
    if owner.recurrent and n_seq > 1:
        raise UsageError("a model with a recurrent state (a hybrid) verifies draft chains, not trees",
                         hint="draft a chain: --draft-topk 1")


class Snapshots:
    """REPLAY: each sequence's recurrent state from before the chain it is verifying (on the device)."""

    def __init__(self) -> None:
        self._saved: dict[int, bytes] = {}  # seq -> llama.cpp's description of the device copy

    def take(self, owner: Any, seq: int) -> None:
        self._saved[seq] = state.read(owner, seq, partial=True, on_device=True)

    def restore(self, owner: Any, seq: int) -> bool:
        data = self._saved.pop(seq, None)
        return data is not None and state.write(owner, seq, data, partial=True, on_device=True)

    def drop(self, seq: int) -> None:
        self._saved.pop(seq, None)

    def has(self, seq: int) -> bool:
        return seq in self._saved


def before_verify(owner: Any, seq: int, n_tokens: int) -> None:
    """A chain of n_tokens goes into `seq`: save what it may have to give back where llama.cpp's own
    snapshots would not cover it (REPLAY, or a chain longer than NATIVE's n_rs_seq + 1)."""
    if n_tokens < 2 or owner.rollback_mode is None:
        return
    if owner.rollback_mode == REPLAY or n_tokens - 1 > owner._ll.llama_n_rs_seq(owner._ctx):
        owner._snapshots.take(owner, seq)


def keep(owner: Any, seq: int, n_past: int, kept: Sequence[int], n_verified: int) -> None:
    """The chain of n_verified tokens decoded into `seq` at n_past (a recurrent owner): keep its first
    len(kept) tokens (`kept`: their ids) and give the rest back, in the attention KV and the state."""
    k = len(kept)
    if k == n_verified:  # all of it accepted: nothing to give back
        owner._snapshots.drop(seq)
        return
    if not owner._snapshots.has(seq):  # NATIVE: llama.cpp's snapshot k tokens in
        if not owner._ll.llama_memory_seq_rm(owner._mem, seq, n_past + k, -1):
            raise HomespecError(f"llama.cpp could not give back {n_verified - k} draft tokens of a recurrent "
                                "state", hint="the context keeps fewer snapshots than the draft was long")
        return
    _restore(owner, seq, n_past)
    if k:  # the accepted tokens again, into the restored state (their logits are known already)
        owner._decode_rows([(int(t), n_past + j, (seq,), False) for j, t in enumerate(kept)])


def discard(owner: Any, seq: int, n_past: int) -> bool:
    """A verified chain never committed: give all of it back -> whether the sequence ends at n_past
    again. Without a saved state (NATIVE: its snapshots do not reach back past the chain's first token)
    the sequence is emptied instead, and the caller says so."""
    if owner._snapshots.has(seq):
        _restore(owner, seq, n_past)
        return True
    owner._ll.llama_memory_seq_rm(owner._mem, seq, -1, -1)
    return False


def _restore(owner: Any, seq: int, n_past: int) -> None:
    """REPLAY: the state saved before the chain, and the attention KV cut back to where it began."""
    if not owner._snapshots.restore(owner, seq):
        raise HomespecError("llama.cpp refused the recurrent state saved before the draft was verified",
                            hint="decode without a drafter (--method none) and report this")
    owner._ll.llama_memory_seq_rm(owner._mem, seq, n_past, -1)
