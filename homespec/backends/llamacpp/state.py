"""A llama.cpp sequence's state in bytes: what prompt reuse keeps beyond the KV it can cut.

Two uses (docs/server.md, "Prompt reuse"):

* **Checkpoints.** A recurrent state (Mamba-style layers of hybrid models: Qwen3.5/3.6, Qwen3-Next)
  holds the whole history in one cell and cannot be cut back to an earlier position, and a
  sliding-window cache that is not full-size (llama.cpp's default, and homespec's: the plan
  budgets the window) has dropped the cells older than its window. So after a prompt is prefilled
  the engine keeps the *partial* state (`LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY`: the recurrent / SWA
  part only, small) with its position; a later prompt sharing that prefix restores it, cuts the
  ordinary KV back to the same position, and prefills from there (llama-server keeps such
  checkpoints too, `--ctx-checkpoints`).
* **Host RAM** (`--cache-ram`): a lane's whole state, saved before another request takes the lane
  and restored when its conversation comes back.

Functions over a LlamaCppCore's context and memory (`owner._ll`, `_ctx`, `_mem`); sequence ids are
llama.cpp's.
"""

from __future__ import annotations

import ctypes
from typing import Any


def cut_anywhere(owner: Any) -> bool:
    """Whether the memory can be cut at any position: no recurrent state, and an SWA cache that is
    full-size (or none)."""
    return not (owner.recurrent or (owner.n_swa > 0 and not owner.swa_full))


def cut(owner: Any, seq: int, keep: int) -> bool:
    """Drop `seq`'s cells from position `keep` on -> whether what remains is usable: llama.cpp
    refuses to cut a recurrent state, and an SWA cache must still hold the window before `keep`
    (llama_memory_seq_pos_min at most keep - n_swa). On False the caller resumes from a
    checkpoint or empties the sequence."""
    ll, mem = owner._ll, owner._mem
    if owner.recurrent or not ll.llama_memory_seq_rm(mem, seq, keep, -1):
        return False
    if keep > 0 and owner.n_swa > 0 and not owner.swa_full:
        return ll.llama_memory_seq_pos_min(mem, seq) <= max(0, keep - owner.n_swa)
    return True


def read(owner: Any, seq: int, *, partial: bool = False, on_device: bool = False) -> bytes:
    """The sequence's state (partial: its recurrent / SWA part only; on_device: the tensors' data stays
    in a device buffer llama.cpp keeps for `seq`, the bytes returned only describe it)."""
    ll, flags = owner._ll, _flags(owner, partial, on_device)
    n = int(ll.llama_state_seq_get_size_ext(owner._ctx, seq, flags))
    buf = (ctypes.c_uint8 * max(1, n))()
    got = int(ll.llama_state_seq_get_data_ext(owner._ctx, buf, n, seq, flags))
    return bytes(buf[:got])


def write(owner: Any, seq: int, data: bytes, *, partial: bool = False, on_device: bool = False) -> bool:
    """Load `data` into sequence `seq` -> whether llama.cpp took it (it reads 0 bytes on a mismatch)."""
    if not data:
        return False
    ll = owner._ll
    buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
    flags = _flags(owner, partial, on_device)
    return int(ll.llama_state_seq_set_data_ext(owner._ctx, buf, len(data), seq, flags)) > 0


def resume(owner: Any, seq: int, pos: int, data: bytes) -> bool:
    """Put `seq` back at position `pos` from a checkpoint: its partial state, then the ordinary KV
    cut there. False (and the sequence emptied) when llama.cpp refuses either."""
    ll, mem = owner._ll, owner._mem
    if write(owner, seq, data, partial=True) and ll.llama_memory_seq_rm(mem, seq, pos, -1):
        return True
    ll.llama_memory_seq_rm(mem, seq, -1, -1)
    return False


def _flags(owner: Any, partial: bool, on_device: bool = False) -> int:
    ll = owner._ll
    flags = int(ll.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY) if partial else int(ll.LLAMA_STATE_SEQ_FLAGS_NONE)
    return flags | (int(ll.LLAMA_STATE_SEQ_FLAGS_ON_DEVICE) if on_device else 0)
