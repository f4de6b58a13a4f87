"""The seam between the generate loop and the engines that run a target model.

Conventions every backend follows (the loop depends on them):

* The KV cache holds every committed token. The newest emitted token (the *root*) is not yet
  in the cache: it is fed as node 0 of the next `verify` call.
* `prefill(tokens)` appends `tokens` to the cache and returns logits for the last position and
  features (captured hidden states) for every position.
* `verify(tokens, parents)` evaluates a draft tree in one target pass *without* committing it:
  node i sits at position `n_past + depth(i)` and attends to the committed cache plus its own
  ancestors. `parents[0] == -1` (the root); `parents[i] < i`.
* `commit(path)` keeps the KV of the nodes on `path` (node indices of the last verify, root
  first, each the parent of the next) in contiguous slots and drops the other nodes.
* `rollback(n)` drops the last n committed tokens.

A call that breaks these rules raises one type whichever backend runs: `TreeError` for a
malformed tree or path (checked by homespec.contracts.tree, the tree contract's one home),
`ContractError` for a commit with nothing verified or a rollback past the start.

Arrays crossing this seam are numpy arrays on the host, whatever device the backend computes on:
the step around a target pass (tree, verification, guard, grammar) runs in numpy, and the GGUF
path never imports torch (docs/architecture.md, "Where each part runs"). A llama.cpp backend
copies its logits out of llama.cpp's buffer once, in the order handed out, or, for the engine's own
step (`verify(view=True)`), leaves them there (a view) and a tree's feature rows too (`NodeRows`,
gathered when read); the torch and EXL2 backends convert at their own boundary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np

from homespec.errors import ContractError


class NodeRows(Protocol):
    """A pass's per-node rows left in the backend's buffers (backends/llamacpp/features.py:
    FeatureRows): `rows[nodes]` gathers [len(nodes), width] float32. Valid until the backend decodes
    again, a commit included (a path re-decoded to keep cells in order)."""

    shape: tuple[int, int]

    def __getitem__(self, nodes: Any) -> np.ndarray: ...


@dataclass(frozen=True, slots=True)
class Forward:
    logits: np.ndarray  # [T, V] float32: next-token logits per position / tree node
    # [T, k*H] float32: captured layer inputs, in feature_layers order; from a viewed tree pass
    # (verify(view=True)) rows indexable by node lists, gathered when read (FeatureRows), valid
    # until the next decode like the viewed logits
    features: np.ndarray | NodeRows | None = None
    # node i's logits are logits[rows[i]]: a tree's rows left in the pass's batch order, ungathered
    # (a 48-node tree's 48 x V floats are not copied to be arg-maxed); None: logits[i]
    rows: tuple[int, ...] | None = None

    @property
    def n_nodes(self) -> int:
        """How many nodes the pass has rows for."""
        return len(self.rows) if self.rows is not None else int(self.logits.shape[0])

    def pick(self, i: int) -> int:
        """The target's greedy token after node i alone: one row arg-maxed where it lies (a greedy
        tree's walk needs the rows of the nodes it accepted, not all of them)."""
        return int(self.logits[i if self.rows is None else self.rows[i]].argmax())

    def node_logits(self) -> np.ndarray:
        """[T, V] the logits in node order (gathered where `rows` says the pass left them in its own)."""
        return self.logits if self.rows is None else self.logits[np.asarray(self.rows, dtype=np.intp)]


@dataclass(frozen=True, slots=True)
class MemoryReport:
    """What the engine itself says it allocated, for plan-vs-actual comparison (bytes)."""

    weights_bytes: int
    kv_bytes: int
    compute_bytes: int
    device: str
    detail: dict[str, int] = field(default_factory=dict)

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_bytes + self.compute_bytes


@dataclass(frozen=True, slots=True)
class PrefillWork:
    """Prompt tokens appended to a lane (a long prompt arrives in chunks)."""

    lane: int
    tokens: tuple[int, ...]
    want_logits: bool  # the last chunk of a prompt: logits of its last row


@dataclass(frozen=True, slots=True)
class TreeWork:
    """A draft tree (or a lone root token: plain decoding) verified for a lane, not committed."""

    lane: int
    tokens: tuple[int, ...]  # the tree's nodes, root first
    parents: tuple[int, ...]


def nothing_verified() -> ContractError:
    """The error of a commit() with no verify() since the last commit, rollback or prefill."""
    return ContractError("commit without a preceding verify", hint="call verify(tokens, parents) first")


def check_rollback(n: int, n_past: int) -> int:
    """`n` as an int, after checking that rollback(n) stays inside the committed tokens."""
    if not 0 <= int(n) <= n_past:
        raise ContractError(f"cannot roll back {n} of {n_past} committed tokens",
                            hint="roll back at most the tokens committed since the prefill")
    return int(n)


@runtime_checkable
class Tokenizer(Protocol):
    eos_ids: frozenset[int]
    bos_id: int | None

    def encode(self, text: str, add_bos: bool = True, special: bool = False) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def chat_prompt(self, messages: Sequence[dict[str, str]], add_generation_prompt: bool = True) -> str:
        """Render messages ({'role', 'content'}) with the model's own chat template."""
        ...


@runtime_checkable
class Backend(Protocol):
    name: str  # "torch" | "llamacpp" | "exl2"
    device: str  # "cpu", "cuda:0", "mps"
    n_vocab: int
    max_context: int
    supports_tree: bool
    tokenizer: Tokenizer
    model_path: str

    @property
    def n_past(self) -> int:
        """Committed tokens in the KV cache."""
        ...

    @property
    def n_layer(self) -> int: ...

    @property
    def hidden_size(self) -> int: ...

    def set_feature_layers(self, layers: Sequence[int]) -> None:
        """Capture the *inputs* of these decoder layers (0-based) in every later forward."""
        ...

    def prefill(self, tokens: Sequence[int]) -> Forward: ...

    def verify(self, tokens: Sequence[int], parents: Sequence[int]) -> Forward: ...

    def commit(self, path: Sequence[int]) -> None: ...

    def rollback(self, n: int) -> None: ...

    def reset(self) -> None: ...

    def memory_report(self) -> MemoryReport: ...

    def close(self) -> None: ...


class Lanes(Protocol):
    """A target that decodes `lanes` sequences, every lane's work in one pass (the engine's seam).

    `decode(work)` takes at most one PrefillWork or TreeWork per lane and returns one Forward per
    item: a tree's logits [T, V] in node order, a prefill chunk's last row (or none) and features
    for every row; the logits may be a view of the backend's own buffer, and a one-lane tree's
    features rows left there (NodeRows), valid until the next decode: the step reads what it uses
    before commit, which may decode (a path re-decoded to keep cells in order asks for no logits,
    but rewrites the feature buffers; the several-lane backend copies its features for that reason). `commit(lane, path)` keeps a verified tree's accepted path; `trim(lane, keep)`
    keeps a lane's first `keep` committed tokens and drops the rest (False when the memory cannot
    be cut there: the lane is then empty); `free(lane)` empties it. Built on llama.cpp's sequence
    ids (backends/llamacpp/multi.py), or over one single-sequence Backend (engine/lanes.py).
    """

    lanes: int
    lane_ctx: int  # tokens one lane holds: prompt, answer and a draft tree
    batch_rows: int  # the most rows one pass takes
    n_vocab: int
    tokenizer: Tokenizer

    def n_past(self, lane: int) -> int: ...

    def decode(self, work: Sequence[PrefillWork | TreeWork]) -> list[Forward]: ...

    def commit(self, lane: int, path: Sequence[int]) -> None: ...

    def trim(self, lane: int, keep: int) -> bool: ...

    def free(self, lane: int) -> None: ...

    def close(self) -> None: ...
