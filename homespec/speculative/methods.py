"""Every drafting method `--method` names, one entry each, looked up by `find_method` / `method_entry`
alone; each entry's name is its drafter's (`--method draft` drafts with the drafter named "draft").

An entry says how to make the method's drafter for a lane, how to clone it for another lane (the
same head's weights, the same suffix store, its own state), how large a tree one verification of
it holds, and what it needs: an EAGLE head, a draft model, the target's features; whether it is a
lookup (its chains come from text already written). Adding a method is one drafter module under
homespec/speculative/drafters/ and one entry here. The drafters are imported at the top, but for one:
beside a torch or EXL2 target the EAGLE head runs in torch (homespec.speculative.drafters.eagle3_torch
over homespec.nets.eagle3_drafter, the one drafter that imports torch), imported here alone, and only
when it is made: on a GGUF the head (eagle3) and the model's own MTP layers (mtp) run in llama.cpp,
and no method loads torch (docs/architecture.md, "Where each part runs").
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Protocol

from homespec.backends.registry import backend_entry
from homespec.errors import UsageError
from homespec.formats.acceptance import read_prior
from homespec.plan.acceptance import MTP_ACCEPT
from homespec.speculative.drafters.auto import AutoDrafter
from homespec.speculative.drafters.draft_model import DraftModelDrafter
from homespec.speculative.drafters.eagle3 import HeadDrafter
from homespec.speculative.drafters.mtp import MtpDrafter
from homespec.speculative.drafters.ngram import NgramDrafter
from homespec.speculative.drafters.suffix import SuffixDrafter

if TYPE_CHECKING:
    from homespec.contracts.backend import Backend, Lanes
    from homespec.contracts.drafter import Drafter
    from homespec.speculative.drafters.eagle3_torch import Eagle3Drafter
    from homespec.speculative.drafters.suffix import SuffixStore

# auto: the longest chain a lookup offers; the guard verifies the part of it that pays (on this
# project's 2-core CPU 2-5 tokens, on a GPU, where rows are nearly free, all of it)
LOOKUP_DEPTH = 8


class DraftOptions(Protocol):
    """What making a drafter reads of the run's options (homespec.engine.options.RunOptions, which
    the engine passes; a protocol here because the options sit in the engine's layer above)."""

    @property
    def ctx(self) -> int: ...

    @property
    def draft_depth(self) -> int: ...

    @property
    def draft_topk(self) -> int: ...

    @property
    def draft_tokens(self) -> int: ...

    @property
    def window(self) -> int | None: ...


@dataclass(frozen=True, slots=True)
class DraftInputs:
    """What a drafter is made from: the target it drafts on and the run's options."""

    target: "Backend | Lanes"  # the one-sequence backend or the lanes
    opt: DraftOptions
    head: Path | None = None  # the EAGLE head, for a method that drafts with one
    store: "SuffixStore | None" = None  # the suffix store the lanes share (None: one of its own)
    draft_model: "Backend | None" = None  # the loaded draft model (--method draft)
    mtp: bool = False  # the target was loaded with its MTP layers (--method mtp, or auto on such a model)


Clone = Callable[["Drafter", "Backend | Lanes", "SuffixStore | None"], "Drafter"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Method:
    name: str
    make: Callable[[DraftInputs], "Drafter"] | None  # None: plain decoding
    clone: Clone | None  # (first, target, store) -> another lane's drafter; None: one lane only
    nodes: Callable[[DraftOptions], int]  # (opt) -> nodes of the largest tree one verification holds
    needs_head: bool = False  # drafts with an EAGLE head, which must exist (--draft or the shipped one)
    uses_head: bool = False  # drafts with an EAGLE head when there is one
    draft_model: bool = False  # --draft is a second, small model the drafter runs
    features: bool = False  # reads the target's features (an EAGLE head)
    lookup: bool = False  # finds its chains in text already written
    trees: bool = False  # drafts trees sized by --draft-tokens (else chains of --draft-depth)
    needs_mtp: bool = False  # drafts with the model's own MTP layers, which it must have

    @property
    def speculative(self) -> bool:
        return self.make is not None


def lookup_depth(opt: DraftOptions) -> int:
    """The longest chain auto's lookups offer (at least --draft-depth)."""
    return max(LOOKUP_DEPTH, opt.draft_depth)


# --- the makers --------------------------------------------------------------------------------


def _ngram(depth: int, max_ngram: int = 3) -> "Drafter":
    return NgramDrafter(max_ngram=max_ngram, num_draft=depth)


def _suffix(depth: int, store: "SuffixStore | None") -> "Drafter":
    return SuffixDrafter(store, num_draft=depth)


def _eagle(target: "Backend | Lanes", where: Path, opt: DraftOptions) -> "Drafter":
    """An EAGLE-3 drafter with the head in `where`, and its recorded acceptance as the guard's prior:
    in llama.cpp beside a llama.cpp target, else the torch head beside the torch or EXL2 target."""
    if backend_entry(target.name).open_head is not None:
        drafter = _eagle_in_target(target, where, opt)
        drafter.expected_acceptance = read_prior(where, opt.draft_depth, opt.draft_topk, opt.draft_tokens)
        return drafter
    # torch side: only a torch or EXL2 target loads these (the GGUF run path never imports torch)
    from homespec.nets.eagle3 import load_head
    from homespec.speculative.drafters.eagle3_torch import Eagle3Drafter

    head = load_head(where, target.n_layer, target.hidden_size, target.n_vocab,
                     device=target.device if target.name == "torch" else "cpu")
    window = head.config.draft_window if opt.window is None else (opt.window or None)
    drafter = Eagle3Drafter(head, target, depth=opt.draft_depth, topk=opt.draft_topk, total=opt.draft_tokens,
                            window=window, capacity=opt.ctx + opt.draft_tokens + 8, source=str(where))
    drafter.expected_acceptance = read_prior(where, opt.draft_depth, opt.draft_topk, opt.draft_tokens)
    return drafter


def _eagle_in_target(target: "Backend | Lanes", where: Path, opt: DraftOptions) -> "Drafter":
    """The head in the target's own engine (llama.cpp: an eagle3 GGUF in a context beside the
    target, homespec.backends.registry open_head), one network for every lane of the target (each
    lane's drafter clones this one's)."""
    head = backend_entry(target.name).open_head(target, where, opt)
    return HeadDrafter(head.net, depth=opt.draft_depth, topk=opt.draft_topk, total=opt.draft_tokens,
                       width=len(head.layers) * target.hidden_size, window=head.window or 0,
                       source=str(where), feature_layers=head.layers)


def _mtp(target: "Backend | Lanes", opt: DraftOptions) -> "Drafter":
    """The target's own MTP layers in its engine beside it (llama.cpp: backends/llamacpp/mtp.py,
    homespec.backends.registry open_mtp), one network for every lane of the target, with the EAGLE
    drafter's policy; the guard's prior is the planner's assumed MTP acceptance
    (homespec.plan.acceptance.MTP_ACCEPT)."""
    open_mtp = backend_entry(target.name).open_mtp
    if open_mtp is None:
        raise UsageError(f"--method mtp runs a model's MTP layers in llama.cpp, not the {target.name} backend",
                         hint="use --backend llamacpp with a GGUF that has MTP layers")

    net = open_mtp(target, opt)
    drafter = MtpDrafter(net, depth=opt.draft_depth, topk=opt.draft_topk, total=opt.draft_tokens,
                         width=target.hidden_size, window=0, source="mtp")
    drafter.expected_acceptance = tuple(MTP_ACCEPT ** d for d in range(1, opt.draft_depth + 1))
    return drafter


def _auto(i: DraftInputs) -> "Drafter":
    """The lookups and, behind one lane, the model drafter (homespec.speculative.choice): the model's own MTP
    layers where it has them (they beat a separate head: docs/speculative.md), else the EAGLE head
    when there is one."""
    if i.mtp:  # a chain, as llama-server drafts them: a tree's levels would each take the host a top-k over
        # the whole vocabulary (MTP layers have no draft vocabulary, and the device top-k is the eagle3 graph's)
        model = _mtp(i.target, replace(i.opt, draft_topk=1, draft_tokens=i.opt.draft_depth + 1))
    else:
        model = _eagle(i.target, i.head, i.opt) if i.head is not None else None
    depth = lookup_depth(i.opt)
    return AutoDrafter([_ngram(depth), _suffix(depth, i.store)], model)


def _draft_model(i: DraftInputs) -> "Drafter":
    if i.draft_model.n_vocab != i.target.n_vocab:
        i.draft_model.close()
        raise UsageError(f"the draft model has {i.draft_model.n_vocab} tokens, the target {i.target.n_vocab}",
                         hint="a draft model must share the target's tokenizer")
    return DraftModelDrafter(i.draft_model, depth=i.opt.draft_depth)


# --- the clones: another lane's drafter like the first ---------------------------------------------


def clone_drafter(first: "Drafter", target: "Backend | Lanes", store: "SuffixStore | None") -> "Drafter":
    """Another lane's drafter like `first`: the same head's weights, the same store, its own state
    (the method is the one its drafter is named for)."""
    method = find_method(first.name)
    if method is None or method.clone is None:
        raise UsageError(f"several lanes cannot draft with {first.name}", hint="use --parallel 1 with this method")
    return method.clone(first, target, store)


def _clone_auto(first: "AutoDrafter", target: "Backend | Lanes", store: "SuffixStore | None") -> "Drafter":
    model = clone_drafter(first.model, target, store) if first.model is not None else None
    return AutoDrafter([clone_drafter(d, target, store) for d in first.lookups], model)


def _clone_eagle(first: "HeadDrafter | Eagle3Drafter", target: "Backend | Lanes",
                 store: "SuffixStore | None") -> "Drafter":
    if getattr(first, "net", None) is not None:  # a network in llama.cpp: one more lane of the same one
        d = type(first)(first.net, depth=first.depth, topk=first.topk, total=first.total, width=first.width,
                        window=first.window or 0, source=first.source, feature_layers=first.feature_layers)
        d.expected_acceptance = first.expected_acceptance
        return d
    from homespec.speculative.drafters.eagle3_torch import Eagle3Drafter  # torch side, as in _eagle

    d = Eagle3Drafter(first.head, target, depth=first.depth, topk=first.topk, total=first.total,
                      window=first.window, capacity=first.cache.capacity, source=first.source)
    d.expected_acceptance = first.expected_acceptance
    return d


def _chain(opt: DraftOptions) -> int:
    return opt.draft_depth + 1


# one entry per method, keyed by the name its drafter carries (clone_drafter finds it by that name)
_METHODS: dict[str, Method] = {m.name: m for m in (
    Method(name="auto", make=_auto, clone=_clone_auto, uses_head=True, features=True, lookup=True,
           trees=True, nodes=lambda opt: max(opt.draft_tokens, lookup_depth(opt) + 1)),
    Method(name="none", make=None, clone=None, nodes=lambda opt: 1),
    Method(name="ngram", make=lambda i: _ngram(max(1, i.opt.draft_depth)), lookup=True, nodes=_chain,
           clone=lambda first, target, store: _ngram(first.num_draft, first.max_ngram)),
    Method(name="suffix", make=lambda i: _suffix(max(1, i.opt.draft_depth), i.store), lookup=True,
           nodes=_chain, clone=lambda first, target, store: _suffix(first.num_draft, store)),
    Method(name="draft", make=_draft_model, clone=None, draft_model=True, nodes=_chain),
    Method(name="eagle3", make=lambda i: _eagle(i.target, i.head, i.opt), clone=_clone_eagle,
           needs_head=True, uses_head=True, features=True, trees=True, nodes=lambda opt: opt.draft_tokens),
    Method(name="mtp", make=lambda i: _mtp(i.target, i.opt), clone=_clone_eagle, needs_mtp=True,
           features=True, trees=True, nodes=lambda opt: opt.draft_tokens),
)}


# every --method value, in the order the hints list them
METHOD_NAMES: tuple[str, ...] = tuple(_METHODS)


def find_method(name: str) -> Method | None:
    """The entry of --method `name` (None: no such method): the one lookup in the registry."""
    return _METHODS.get(name)


def method_entry(name: str) -> Method:
    """The entry of --method `name`, or a usage error naming the choices."""
    method = find_method(name)
    if method is None:
        raise UsageError(f"unknown method '{name}'", hint=f"choose one of: {', '.join(METHOD_NAMES)}")
    return method
