"""One request in a lane: its drafter, sampling generator, text, and the responses it puts on its
Handle (StepFigures and TextDelta per step, then one Finish).

The engine's step (homespec.engine.step) asks each running request for its share of the pass
(`prefill_chunk`: the next piece of its prompt; `draft`: its tree for this step), runs the pass,
and hands each its result (`prefilled`, `verified`): greedy or rejection-sampled verification
against the request's own Sampler and seeded generator, so a request's tokens do not depend on
who shares its pass. A request that reuses its lane's cached prefix starts with `kept` prompt
tokens already in the target's KV and in its drafter's state (homespec.engine.reuse): only the
rest is prefilled. Responses are put without waking the consumer: the engine wakes every consumer
at once just before its next target pass (Engine._wake).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from homespec.contracts.backend import Forward, PrefillWork, TreeWork
from homespec.contracts.drafter import Offer
from homespec.contracts.tree import Verdict, chain
from homespec.speculative.choice import PLAIN, Choice
from homespec.engine.detok import Detokenizer
from homespec.engine.responses import Finish, StepFigures, TextDelta
from homespec.speculative.logprobs import token_logprobs
from homespec.speculative.sampling import rng_seed
from homespec.speculative.steps import Limits, Step, cut_at_eos, finish_reason, pick, root_only, truncate
from homespec.speculative.verify import verify_greedy, verify_lazy, verify_sampled

if TYPE_CHECKING:
    from homespec.contracts.backend import Lanes
    from homespec.contracts.drafter import Drafter, DraftShape
    from homespec.contracts.tree import DraftTree
    from homespec.engine.api import Handle


@dataclass
class Running:
    handle: "Handle"
    lane: int
    drafter: "Drafter | None"
    eos: frozenset[int]
    lane_ctx: int
    detok: Detokenizer | None  # None: token ids only (homespec.engine.run.decode)
    shape0: "DraftShape | None" = None  # the drafter's shape as loaded: the proportions of a shorter draft
    kept: int = 0  # prompt tokens reused from the lane's cache (not prefilled)
    fed: int = 0  # prompt tokens in the cache so far
    root: int = -1  # the pending token (emitted, not yet in the cache)
    context: list[int] = field(default_factory=list)  # every committed token
    n_out: int = 0
    steps: list[Step] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)
    done: bool = False
    reason: str | None = None  # why the answer ended, once done
    t0: float = field(default_factory=time.perf_counter)
    prefill_s: float = 0.0
    _feats: list[np.ndarray] = field(default_factory=list)  # the prompt's features, chunk by chunk
    tree: "DraftTree | None" = None  # this step's draft, verified and not yet committed
    t_draft: float = 0.0
    depth: int = 0  # the draft depth the guard gave this step
    just_prefilled: bool = False  # the prompt's last chunk went in this step
    choice: Choice = PLAIN  # what the guard chose for this step (homespec.speculative.choice)
    t_offer: float = 0.0  # this step's lookups (what the drafters offered), part of its drafting time

    def __post_init__(self) -> None:
        r = self.handle.request
        self.prompt = list(r.prompt_ids)
        self.sampler = None if r.sampler is None or r.sampler.greedy else r.sampler
        self.generator = np.random.default_rng(rng_seed(r.seed))  # any integer a client sent
        self.limits = Limits(max_tokens=r.max_tokens)
        self.fed = self.kept
        # committed tokens the drafter's state covers: the kept prefix (trimmed to it at
        # admission), the whole prompt after begin(), every committed token after each accept()
        self.drafter_len = self.kept if self.drafter is not None else 0
        # a grammar (structured output, a forced tool call): this answer's own matcher, never a lane's
        self.guide = r.grammar.start() if r.grammar is not None else None
        self.masks: np.ndarray | None = None  # [T, V] the grammar's mask after each node of this step's tree
        self.scores: tuple = ()  # this step's tokens' log-probabilities, when the request asks for them

    @property
    def cached(self) -> list[int]:
        """The tokens this request leaves in its lane's KV cache (what a later prompt may reuse)."""
        return list(self.context) if not self.prefilling and self.context else self.prompt[:self.fed]

    @property
    def prefilling(self) -> bool:
        return self.fed < len(self.prompt)

    # --- prefill -------------------------------------------------------------------------------

    def prefill_chunk(self, budget: int) -> PrefillWork | None:
        """The next `budget` tokens of the prompt (None when the budget is spent)."""
        n = min(budget, len(self.prompt) - self.fed)
        if n <= 0:
            return None
        chunk = tuple(self.prompt[self.fed:self.fed + n])
        self.fed += n
        return PrefillWork(self.lane, chunk, want_logits=not self.prefilling)

    def prefilled(self, fwd: Forward, backend: "Lanes", t_verify: float, t_step: float) -> None:
        """A chunk is in the cache; after the last one, the first token (the prefill's Step)."""
        if fwd.features is not None:
            self._feats.append(fwd.features)
        if self.prefilling:
            return
        t1 = time.perf_counter()
        self.root = pick(self._allowed(fwd.logits[-1:])[0], self.sampler, self.generator)
        self._follow([self.root], fwd, (-1,))
        self.context = list(self.prompt)
        if self.drafter is not None:  # its state holds the kept prefix; the features cover the rest
            feats = (self._feats[0] if len(self._feats) == 1 else np.concatenate(self._feats)) if self._feats else None
            self.drafter.begin(self.prompt, Forward(logits=fwd.logits, features=feats), kept=self.kept)
            self.drafter_len = len(self.prompt)
        self._feats = []
        self.n_out = 1
        self.just_prefilled = True  # the engine checkpoints the lane here, where it needs to (reuse.py)
        n_past = backend.n_past(self.lane)
        finish = finish_reason([self.root], 1, self.eos, self.limits, n_past, self.lane_ctx)
        t2 = time.perf_counter()
        self._emit(Step((self.root,), 0, 0, n_past, t2 - t1, t_verify, t_step + (t2 - t1), False, finish))

    # --- decode --------------------------------------------------------------------------------

    @property
    def reaches(self) -> dict[str, int]:
        """This lane's lookups by source, each with the longest chain it offers (none: no lookup)."""
        return getattr(self.drafter, "reaches", {}) if self.drafter is not None else {}

    def offers(self, floor: int = 1) -> tuple[Offer, ...]:
        """What this lane's drafter can draft this step: a lookup's chain, found now from a match
        at least `floor` long (the guard's BatchGuard.match_floor; 0: no chain could pay, so the
        lookups do not search), and a model drafter's promise to draft when chosen."""
        if self.drafter is None:
            return ()
        t0 = time.perf_counter()
        find = getattr(self.drafter, "offers", None)  # a drafter without offers() drafts when chosen
        if find is None:
            out: tuple[Offer, ...] = (Offer(self.drafter.name),)
        elif self.reaches:
            out = find(self.root, self.context, floor=floor)
        else:
            out = find(self.root, self.context)
        self.t_offer = time.perf_counter() - t0
        return out

    def draft(self, choice: Choice, backend: "Lanes") -> TreeWork:
        """This step's tree: the chosen chain cut to its depth, or the drafter's proposal at the
        chosen depth (None: its own shape), or the root alone (depth 0)."""
        t0 = time.perf_counter()
        room = self.lane_ctx - backend.n_past(self.lane)
        tree = root_only(self.root)
        depth, offer = choice.depth, choice.offer
        if offer is not None and not offer.known:  # a model drafter, at the chosen depth
            if depth is None:
                depth = self.drafter.shape.depth
            elif depth > 0 and self.drafter.shape.depth != depth:
                nodes = _nodes_at(self.shape0 or self.drafter.shape, depth)
                self.drafter.set_shape(*self.drafter.limits().clamp(depth, nodes))
        depth = depth or 0
        if depth > 0 and offer is not None and room > 1 and offer.known:
            tree = chain((self.root, *offer.tokens[:depth]))
        elif depth > 0 and offer is not None and room > 1:
            tree = self.drafter.propose(self.root, self.context)
        if tree.size > room:  # keep the tree inside the context: drop the deepest nodes
            tree = truncate(tree, room)
        if self.guide is not None:  # nodes whose path leaves the grammar go before the target sees them
            tree, self.masks = self.guide.prune(tree)
        self.tree, self.depth, self.choice = tree, depth, choice
        self.t_draft, self.t_offer = self.t_offer + time.perf_counter() - t0, 0.0
        return TreeWork(self.lane, tuple(tree.tokens.tolist()), tuple(tree.parents.tolist()))

    def verified(self, fwd: Forward, backend: "Lanes", t_verify: float, t_step: float) -> Step:
        """Accept, commit and emit this step's tokens. -> the step (for the guard and the stats)."""
        t0 = time.perf_counter()
        tree = self.tree
        if self.sampler is None and self.guide is None:  # greedy: argmax where the logits lie, no copy
            verdict = Verdict((0,), fwd.pick(0)) if tree.size == 1 else verify_lazy(tree, fwd.pick, fwd.n_nodes)
        else:
            logits = self._allowed(fwd.node_logits(), self.masks)  # [T, V]
            if self.sampler is None:
                verdict = verify_greedy(tree, logits)
            else:
                verdict = verify_sampled(tree, logits, self.sampler, self.generator)
        path_tokens = [int(tree.tokens[i]) for i in verdict.path]
        # the pass's logits and features may be views of llama.cpp's buffers, and a commit can
        # decode (a path re-decoded to keep cells in order): read all of them first
        feats = fwd.features[list(verdict.path)] if self.drafter is not None and fwd.features is not None else None
        new = cut_at_eos(path_tokens[1:] + [verdict.next_token], self.eos)
        new = new[:max(0, self.limits.max_tokens - self.n_out)]
        self._follow(path_tokens[1:] + [verdict.next_token], fwd, verdict.path, new)
        backend.commit(self.lane, verdict.path)
        if self.drafter is not None:
            self.drafter.accept(path_tokens, feats, verdict.next_token)
        self.context.extend(path_tokens)
        if self.drafter is not None:
            self.drafter_len = len(self.context)
        self.n_out += len(new)
        n_past = backend.n_past(self.lane)
        finish = finish_reason(new, self.n_out, self.eos, self.limits, n_past, self.lane_ctx)
        t_own = self.t_draft + time.perf_counter() - t0
        step = Step(tuple(new), verdict.accepted, tree.size - 1, n_past, t_own, t_verify, t_step + t_own,
                    self.depth > 0, finish, self.choice.source if tree.size > 1 else None)
        self.root = verdict.next_token
        self.tree, self.masks = None, None
        self._emit(step)
        return step

    # --- a grammar and log-probabilities, for the requests that ask -----------------------------

    def _allowed(self, logits: np.ndarray, masks: np.ndarray | None = None) -> np.ndarray:
        """logits [T, V] with what the request's grammar forbids at -inf (`masks`: one row per
        tree node, from Guide.prune; None: the grammar's state now)."""
        if self.guide is None:
            return logits
        return self.guide.constrain(logits, masks if masks is not None else self.guide.mask()[None, :])

    def _follow(self, emitted: list[int], fwd: Forward, rows: tuple[int, ...],
                kept: list[int] | None = None) -> None:
        """The grammar consumes the emitted tokens; `kept` (the ones the answer keeps, default all)
        are scored on the raw logits of the nodes `rows` they were drawn from
        (homespec.speculative.logprobs)."""
        if self.guide is not None:
            self.guide.advance(emitted)
        top = self.handle.request.logprobs
        if top is not None:
            self.scores = token_logprobs(fwd.node_logits()[list(rows)], emitted if kept is None else kept, top)

    # --- responses -----------------------------------------------------------------------------

    def _emit(self, step: Step) -> None:
        """StepFigures and TextDelta for a step, then the Finish when the answer ended."""
        self.steps.append(step)
        self.ids.extend(step.tokens)
        first = len(self.steps) == 1
        if first:
            self.prefill_s = time.perf_counter() - self.t0
        # the end-of-generation token has no text of its own
        text = "" if self.detok is None else self.detok.push(step.tokens[:-1] if step.finish == "eos" else step.tokens)
        self.parts.append(text)
        self.handle.put_all((StepFigures(step, prefill=first), TextDelta(text, step.tokens, self.scores)), wake=False)
        if self.detok is not None and self.detok.stopped:
            self.end("stop")
        elif step.finish:
            self.end(step.finish)

    def end(self, reason: str | None) -> None:
        """The answer is over (reason "eos" | "stop" | "length" | "context" | "cancelled"; None:
        failed). The engine frees the lane first, then deliver()s the Finish."""
        if not self.done:
            self.done, self.reason = True, reason

    def deliver(self) -> None:
        """Put the text still held and the Finish, and close the stream."""
        tail = self.detok.flush() if self.detok is not None and self.reason not in ("cancelled", None) else ""
        out = []
        if tail:
            self.parts.append(tail)
            out.append(TextDelta(tail, ()))
        decode_s = time.perf_counter() - self.t0 - self.prefill_s if self.steps else 0.0
        out.append(Finish(self.reason, "".join(self.parts), tuple(self.ids), tuple(self.prompt), tuple(self.steps),
                          self.prefill_s, decode_s, cached_tokens=self.kept))
        self.handle.put_all(out, last=True, wake=False)


def _nodes_at(shape: "DraftShape", depth: int) -> int:
    """Tree nodes (root included) of a depth-`depth` draft in the drafter's own proportions."""
    per_level = (shape.total - 1) / max(1, shape.depth)
    return 1 + max(depth, round(per_level * depth))
