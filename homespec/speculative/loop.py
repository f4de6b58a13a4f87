"""The decode loop: one backend-agnostic generator of Step events, the one place that steps the
target and the drafter.

Each step drafts a tree from the pending root token, verifies it in one target pass, keeps the
accepted path in the target's KV cache, and emits the accepted draft tokens plus the target's
own next token. With no drafter every step is a one-node tree: plain decoding on the same path.
The loop knows token ids only: text, and the stop strings found in it, belong to the session
that consumes these events (homespec.session).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Sequence

from homespec.errors import HomespecError

if TYPE_CHECKING:
    from homespec.backends.base import Backend
    from homespec.speculative.drafters.base import Drafter
    from homespec.speculative.sampling import Sampler
    from homespec.speculative.tree import DraftTree


@dataclass(frozen=True, slots=True)
class Step:
    """One iteration of the generate loop, as chat / generate / bench see it."""

    tokens: tuple[int, ...]  # emitted this step (may be empty on the final step)
    accepted: int  # draft tokens accepted this step
    draft_size: int  # draft nodes proposed (excluding the root)
    n_past: int  # committed context length after this step
    t_draft: float  # seconds spent drafting
    t_verify: float  # seconds in the target pass(es)
    t_step: float  # seconds for the whole step
    speculative: bool = True  # False when this step ran plain decoding (guard fallback or --method none)
    finish: str | None = None  # "eos" | "stop" | "length" | "context" on the last step


@dataclass(frozen=True, slots=True)
class Limits:
    max_tokens: int = 256
    stop_at_eos: bool = True  # False: the tokenizer is never read (a backend may have none)


class Controller:
    """Decides, step by step, whether to speculate (the stability guard implements this)."""

    def speculate(self) -> bool:  # pragma: no cover - interface
        return True

    def record(self, step: Step) -> None:  # pragma: no cover - interface
        pass


def _root_only(root: int) -> "DraftTree":
    import torch

    from homespec.speculative.tree import DraftTree

    return DraftTree(torch.tensor([root]), torch.tensor([-1]), torch.ones(1))


def _pick(logits, sampler: "Sampler | None", generator) -> int:
    import torch

    if sampler is None or sampler.greedy:
        return int(torch.argmax(logits))
    return int(sampler.sample(logits, generator))


def decode(
    backend: "Backend",
    drafter: "Drafter | None",
    prompt: Sequence[int],
    *,
    sampler: "Sampler | None" = None,
    limits: Limits = Limits(),
    generator=None,
    controller: Controller | None = None,
) -> Iterator[Step]:
    """Decode from `prompt` (token ids): the prefill's step, then one step per verification, until
    EOS, `limits.max_tokens` or the context ends (the last step's `finish`). The consumer ends it
    early by closing the generator (chat's Ctrl-C, a stop string)."""
    from homespec.speculative.verify import verify_greedy, verify_sampled

    if not prompt:
        raise HomespecError("the prompt is empty", hint="give a prompt of at least one token")
    if len(prompt) >= backend.max_context:
        raise HomespecError(
            f"the prompt has {len(prompt)} tokens but the context holds {backend.max_context}",
            hint="shorten the prompt or raise --ctx",
        )
    eos = backend.tokenizer.eos_ids if limits.stop_at_eos else frozenset()
    context: list[int] = list(prompt)  # every committed token
    n_out = 0

    # --- prefill: the prompt into the cache, the first token from its last logits ------------
    t0 = time.perf_counter()
    fwd = backend.prefill(prompt)  # logits: [1, V]; features: [P, 3H] or None
    root = _pick(fwd.logits[-1], sampler, generator)
    t1 = time.perf_counter()
    if drafter is not None:
        drafter.begin(prompt, fwd)
    t2 = time.perf_counter()
    n_out = 1
    finish = _finish([root], n_out, eos, limits, backend.n_past, backend.max_context)
    yield Step((root,), 0, 0, backend.n_past, t2 - t1, t1 - t0, t2 - t0, False, finish)
    if finish:
        return

    while True:
        t0 = time.perf_counter()
        room = backend.max_context - backend.n_past  # cells left for root + drafts
        wanted = controller.speculate() if controller is not None else True  # also where Ctrl-C lands
        speculate = drafter is not None and wanted and room > 1
        # --- draft: a tree rooted at the pending token (a one-node tree for plain decoding) ---
        tree = drafter.propose(root, context) if speculate else _root_only(root)
        if tree.size > room:  # keep the tree inside the context: drop the deepest nodes
            tree = _truncate(tree, room)
        t1 = time.perf_counter()
        # --- verify: one target pass over every node --------------------------------------------
        fwd = backend.verify(tree.tokens.tolist(), tree.parents.tolist())  # logits: [T, V]
        if sampler is None or sampler.greedy:
            verdict = verify_greedy(tree, fwd.logits)
        else:
            verdict = verify_sampled(tree, fwd.logits, sampler, generator)
        backend.commit(verdict.path)
        t2 = time.perf_counter()
        path_tokens = [int(tree.tokens[i]) for i in verdict.path]
        if drafter is not None:
            feats = fwd.features[list(verdict.path)] if fwd.features is not None else None
            drafter.accept(path_tokens, feats, verdict.next_token)
        t3 = time.perf_counter()
        # --- emit: accepted drafts + the target's own next token ---------------------------------
        context.extend(path_tokens)
        new = path_tokens[1:] + [verdict.next_token]
        new = _cut_at_eos(new, eos)
        new = new[: max(0, limits.max_tokens - n_out)]
        n_out += len(new)
        finish = _finish(new, n_out, eos, limits, backend.n_past, backend.max_context)
        step = Step(tuple(new), verdict.accepted, tree.size - 1, backend.n_past, (t1 - t0) + (t3 - t2), t2 - t1,
                    t3 - t0, speculate, finish)
        if controller is not None:
            controller.record(step)
        yield step
        if finish:
            return
        root = verdict.next_token


def _finish(new: list[int], n_out: int, eos, limits: Limits, n_past: int, max_context: int) -> str | None:
    if new and new[-1] in eos:
        return "eos"
    if n_out >= limits.max_tokens:
        return "length"
    if n_past + 1 >= max_context:
        return "context"
    return None


def _cut_at_eos(tokens: list[int], eos) -> list[int]:
    for i, t in enumerate(tokens):
        if t in eos:
            return tokens[: i + 1]
    return tokens


def _truncate(tree: "DraftTree", size: int) -> "DraftTree":
    """Parents precede children, so the first `size` nodes are a valid subtree."""
    from homespec.speculative.tree import DraftTree

    return DraftTree(tree.tokens[:size], tree.parents[:size], tree.probs[:size])
