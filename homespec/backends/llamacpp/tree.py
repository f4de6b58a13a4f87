"""How a draft tree becomes one llama.cpp batch: sequence ids per node (pure, no llama.cpp).

llama.cpp's attention mask lets a token see a cached cell when the cell shares a sequence id with
it and sits at an earlier or equal position. So a tree fits in one batch when every root-to-leaf
path is its own sequence: leaf j gets sequence id j, and a node belongs to the sequences of all
leaves below it. Node i then sees exactly the committed context (copied into every sequence
before the pass) and its own ancestors, at positions n_past + depth(i). With a unified KV cache
(`kv_unified=True`) one cell carries several sequence ids, so shared prefixes of the tree are
computed and stored once. A chain has one leaf, hence one sequence: no copies at all.

The batch lists the nodes in depth-first order (children in node order, which drafters sort best
first), and llama.cpp fills free KV cells in batch order. So when the accepted path follows first
children, its cells are contiguous and the freed cells form a tail. A path that takes a later
child leaves a hole between accepted cells; `contiguous_prefix` finds where. That matters because
llama.cpp's flash-attention kernel accumulates over cells in cell order: a later token stored in
the hole would see the same values in a different order (docs/backends.md, "cell order").
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from homespec.contracts import tree as contract

if TYPE_CHECKING:
    from homespec.backends.settings import BackendSettings


# llama.cpp's LLAMA_MAX_SEQ: the most sequences a context holds, so the most leaves a verified tree has.
MAX_SEQ = 256
# Leaves a context is sized for when nothing says more. EAGLE-2's default tree (60 nodes, depth 7,
# top-k 10) has at most 50 leaves.
DEFAULT_MAX_LEAVES = 64


def tree_leaves(nodes: int) -> int:
    """The most leaves a tree of `nodes` nodes can have (every node but the root a leaf)."""
    return min(MAX_SEQ, max(1, nodes - 1))


def leaf_capacity(settings: "BackendSettings", max_leaves: int = DEFAULT_MAX_LEAVES) -> int:
    """The most tree leaves (one llama.cpp sequence each) a context of these settings can verify.

    llama.cpp clamps n_batch to n_ctx, reserves that many output rows, and asserts that they
    cover one row per sequence (GGML_ASSERT(n_outputs_max <= cparams.n_outputs_max) aborts the
    process when n_seq_max > min(n_ctx, n_batch)). A smaller context or batch caps the leaves
    instead; verify() then refuses a wider tree with a usage error."""
    return max(1, min(max_leaves, settings.n_batch, settings.n_ctx))


@dataclass(frozen=True, slots=True)
class TreeLayout:
    depths: tuple[int, ...]  # [T] depth of each node; the root is 0
    leaves: tuple[int, ...]  # node indices of the leaves, ascending; leaf j owns sequence id j
    seq_ids: tuple[tuple[int, ...], ...]  # [T] sequence ids of each node (the leaves below it)
    order: tuple[int, ...]  # batch row -> node: depth-first, children in node order
    slot: tuple[int, ...]  # node -> batch row (the inverse of order)

    @property
    def n_seq(self) -> int:
        return len(self.leaves)


def tree_layout(parents: Sequence[int], *, checked: bool = False) -> TreeLayout:
    """The batch layout of a tree (the tree contract itself is homespec.contracts.tree's; `checked`:
    `parents` is what contract.check_parents returned, as check_tree hands it to a backend's verify).
    Layouts are kept by shape: a plain step's lone root and a chain's shape recur every step."""
    return _layout(tuple(parents if checked else contract.check_parents(parents)))


@functools.lru_cache(maxsize=256)
def _layout(parents: tuple[int, ...]) -> TreeLayout:
    n = len(parents)
    children: list[list[int]] = [[] for _ in range(n)]
    for i in range(1, n):
        children[parents[i]].append(i)
    leaves = tuple(i for i in range(n) if not children[i])
    seq = {leaf: j for j, leaf in enumerate(leaves)}
    # a node's sequences are its leaves' ids: children come after their parent, so walking the
    # nodes backwards sees every child's set before its parent's
    owners: list[tuple[int, ...]] = [()] * n
    for i in range(n - 1, -1, -1):
        kids = children[i]
        if not kids:
            owners[i] = (seq[i],)
        elif len(kids) == 1:
            owners[i] = owners[kids[0]]
        else:
            owners[i] = tuple(sorted(j for c in kids for j in owners[c]))
    depth = [0] * n
    for i in range(1, n):
        depth[i] = depth[parents[i]] + 1
    order = _dfs(children)
    slot = [0] * n
    for row, node in enumerate(order):
        slot[node] = row
    return TreeLayout(tuple(depth), leaves, tuple(owners), order, tuple(slot))


def dfs_order(parents: Sequence[int]) -> tuple[int, ...]:
    """Nodes depth first from the root, children in node order (the batch's row order)."""
    children: list[list[int]] = [[] for _ in parents]
    for i in range(1, len(parents)):
        children[parents[i]].append(i)
    return _dfs(children)


def _dfs(children: list[list[int]]) -> tuple[int, ...]:
    order: list[int] = []
    stack = [0]
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(reversed(children[node]))  # first child on top: visited first
    return tuple(order)


def contiguous_prefix(path: Sequence[int], layout: TreeLayout) -> int:
    """How many leading nodes of `path` sit in batch rows 0, 1, 2, ... (hence in adjacent cells)."""
    k = 0
    while k < len(path) and layout.slot[path[k]] == k:
        k += 1
    return k


def path_seq(path: Sequence[int], layout: TreeLayout) -> int:
    """A sequence that contains every node of `path` (any leaf below its last node)."""
    return layout.seq_ids[path[-1]][0]
