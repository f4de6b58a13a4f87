"""homespec.speculative.methods: the one lookup of --method, and each method's drafter named as the method is
(what clone_drafter finds another lane's method by)."""

from __future__ import annotations

import pytest

from homespec.engine.options import RunOptions
from homespec.errors import UsageError
from homespec.speculative.methods import METHOD_NAMES, DraftInputs, clone_drafter, find_method, method_entry

# every --method value the CLI documents (homespec.cli.options.MethodOpt): an interface
CLI_METHODS = ("auto", "none", "ngram", "suffix", "draft", "eagle3", "mtp")


def test_every_cli_method_has_one_entry_named_for_it():
    assert METHOD_NAMES == CLI_METHODS
    for name in CLI_METHODS:
        assert method_entry(name).name == name and find_method(name) is method_entry(name)
    assert not method_entry("none").speculative and all(method_entry(m).speculative for m in CLI_METHODS[2:])


def test_an_unknown_method_is_none_or_a_usage_error_naming_the_choices():
    assert find_method("draft-model") is None
    with pytest.raises(UsageError) as e:
        method_entry("draft-model")
    assert "unknown method 'draft-model'" in str(e.value) and e.value.hint == f"choose one of: {', '.join(CLI_METHODS)}"


def test_the_model_drafters_carry_their_methods_names():
    """eagle3 and mtp need a head or MTP layers to be made; their drafter classes say the name."""
    from homespec.speculative.drafters.draft_model import DraftModelDrafter
    from homespec.speculative.drafters.eagle3 import HeadDrafter
    from homespec.speculative.drafters.mtp import MtpDrafter

    assert (DraftModelDrafter.name, HeadDrafter.name, MtpDrafter.name) == ("draft", "eagle3", "mtp")


@pytest.mark.slow
def test_each_method_makes_and_clones_the_drafter_named_for_it(tmp_path):
    """Made from real inputs (a tiny target on the torch backend, ~10 s to build and load), each
    drafter's name is its method's; clone_drafter finds the method by that name, and refuses the one
    method that drafts on one lane only."""
    from tiny_models import make_tiny_gguf

    from homespec.backends.torch.backend import TorchBackend
    from homespec.speculative.drafters.suffix import SuffixStore

    path = str(make_tiny_gguf(tmp_path / "tiny.gguf", n_layer=2, seed=0))
    target, small = TorchBackend.load(path, max_context=128), TorchBackend.load(path, max_context=128)
    opt, store = RunOptions(method="auto", draft_depth=3, draft_topk=1, draft_tokens=4), SuffixStore()
    try:
        for name in ("ngram", "suffix", "auto", "draft"):
            inputs = DraftInputs(target, opt, store=store, draft_model=small if name == "draft" else None)
            drafter = method_entry(name).make(inputs)
            assert drafter.name == name
            if name == "draft":
                with pytest.raises(UsageError, match="several lanes cannot draft with draft"):
                    clone_drafter(drafter, target, store)
                continue
            twin = clone_drafter(drafter, target, store)
            assert twin.name == name and twin is not drafter and twin.shape == drafter.shape
        auto = method_entry("auto").make(DraftInputs(target, opt, store=store))
        assert [d.name for d in auto.lookups] == ["ngram", "suffix"] and auto.model is None  # no head, no MTP
    finally:
        target.close()
        small.close()
