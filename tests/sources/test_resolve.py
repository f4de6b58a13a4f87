"""--model / --draft resolution: files, directories, URLs-by-name, catalogue names, mismatches."""

from __future__ import annotations

import json

import gguf
import pytest
from safetensors.numpy import save_file

from homespec.errors import UsageError
from homespec.sources.resolve import resolve
from tests.formats.test_formats_gguf import write_gguf
from tests.formats.test_formats_other import LLAMA, eagle_head, write_config

Q = gguf.GGMLQuantizationType


def resolve_model(spelling, quant=None):
    return resolve(spelling, "model", "plan", quant=quant).spec


def resolve_draft(spelling, target):
    return resolve(spelling, "draft", "plan", target=target).spec


def test_one_entry_point_says_what_and_where(smollm2_path, tmp_path):
    named = resolve(str(smollm2_path))
    assert (named.source, named.path, named.spec.format) == ("path", str(smollm2_path), "gguf")
    embedded = resolve(None)
    assert embedded.source == "embedded" and embedded.path == str(smollm2_path)
    listed = resolve("llama-3.1-8b")
    assert listed.source == "catalogue" and listed.path is None and listed.spec.n_embd == 4096
    pairing = resolve(None, "draft", target=listed.spec)
    assert pairing.source == "catalogue" and pairing.spec.target_hidden == 4096
    assert resolve("none", "draft", target=listed.spec).spec is None
    run = resolve(str(smollm2_path), "model", "run")
    assert run.path == str(smollm2_path) and run.spec is None
    head = eagle_head(tmp_path / "head")
    assert resolve(str(head), "head", "run").path == str(head)
    with pytest.raises(UsageError, match="no model file or directory") as err:
        resolve("llama-3.1-8b", "model", "run")
    assert "catalogue names are for `homespec plan`" in err.value.hint


def test_local_gguf_and_directory_holding_one(smollm2_path, tmp_path):
    spec = resolve_model(str(smollm2_path))
    assert (spec.format, spec.n_layer, spec.quant) == ("gguf", 30, "Q4_1")
    folder = tmp_path / "one"
    folder.mkdir()
    write_gguf(folder / "m.gguf")
    assert resolve_model(str(folder)).format == "gguf"
    write_gguf(folder / "n.gguf")
    with pytest.raises(UsageError, match="holds 2 GGUF files"):
        resolve_model(str(folder))
    with pytest.raises(UsageError, match="already Q4_1"):
        resolve_model(str(smollm2_path), quant="q8")


def test_hf_dir_and_config_with_quant(tmp_path):
    folder = write_config(tmp_path / "SmolLM2-135M", LLAMA)
    assert resolve_model(str(folder)).quant == "BF16"
    assert resolve_model(str(folder / "config.json"), quant="q5").quant == "Q5_K_M"


def test_catalogue_names():
    spec = resolve_model("smollm2-135m")
    assert spec.format == "catalogue" and spec.n_layer == 30 and spec.tensors
    assert resolve_model("smollm2-135m", quant="q8").quant == "Q8_0"
    with pytest.raises(UsageError, match="unknown model"):
        resolve_model("no-such-model-xyz")


def test_missing_path_vs_not_a_model(tmp_path):
    with pytest.raises(UsageError, match="no such file or directory"):
        resolve_model(str(tmp_path / "missing.gguf"))
    with pytest.raises(UsageError, match="no such file or directory"):
        resolve_model("./models/llama")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(UsageError, match="not a model file"):
        resolve_model(str(tmp_path / "notes.txt"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UsageError, match="not a model directory"):
        resolve_model(str(empty))


def test_eagle_files_are_not_targets(tmp_path):
    head = eagle_head(tmp_path / "head")
    with pytest.raises(UsageError, match="draft head, not a target") as err:
        resolve_model(str(head))
    assert "--draft" in err.value.hint


def _target(hidden=64, vocab=200):
    from homespec.formats.hf import model_shape_from_config

    cfg = {**LLAMA, "hidden_size": hidden, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": vocab,
           "intermediate_size": 128, "num_hidden_layers": 8}
    return model_shape_from_config(cfg, "target", "test")


def test_draft_none_default_and_catalogue():
    target = resolve_model("llama-3.1-8b")
    assert resolve_draft("none", target) is None
    default = resolve_draft(None, target)
    assert default is not None and default.target_hidden == target.n_embd
    named = resolve_draft("eagle3-llama-3.1-8b", target)
    assert named.kind.startswith("eagle3") and named.target_vocab == target.n_vocab
    with pytest.raises(UsageError, match="4096"):  # a 8B head against a 1B target: both widths named
        resolve_draft("eagle3-llama-3.1-8b", resolve_model("llama-3.2-1b"))


def test_draft_checkpoint_dir_and_mismatch(tmp_path):
    head = eagle_head(tmp_path / "head", hidden=64, target_hidden=64, target_vocab=200)
    draft = resolve_draft(str(head), _target())
    assert draft.kind == "eagle3" and draft.target_hidden == 64
    with pytest.raises(UsageError) as err:
        resolve_draft(str(head), _target(hidden=96))
    assert "64" in err.value.message and "96" in err.value.message
    with pytest.raises(UsageError) as err:
        resolve_draft(str(head), _target(vocab=500))
    assert "200" in err.value.message and "500" in err.value.message
    with pytest.raises(UsageError, match="no such file"):
        resolve_draft(str(tmp_path / "gone"), _target())


def test_draft_gguf_eagle3_and_draft_model(tmp_path, smollm2_path):
    path = write_gguf(tmp_path / "e.gguf", "eagle3", n_layer=1, n_embd=64, n_head=4, n_vocab=200,
                      extra={"eagle3.target_hidden_size": 64},
                      tensors_extra=[("fc.weight", (192, 64), Q.F16), ("d2t", (50,), Q.I64)])
    draft = resolve_draft(str(path), _target())
    assert draft.kind == "eagle3" and draft.draft_vocab == 50
    smol = resolve_model(str(smollm2_path))
    as_model = resolve_draft(str(smollm2_path), smol)
    assert as_model.kind == "model" and as_model.model == smol and as_model.weight_bytes == sum(
        t.n_bytes for t in smol.tensors)
    with pytest.raises(UsageError, match="vocabulary"):
        resolve_draft(str(smollm2_path), _target(vocab=32000))


def test_hf_model_dir_as_draft(tmp_path):
    folder = write_config(tmp_path / "small", {**LLAMA, "num_hidden_layers": 2, "hidden_size": 64,
                                               "intermediate_size": 128, "num_attention_heads": 4,
                                               "num_key_value_heads": 2, "vocab_size": 200})
    save_file({"lm_head.weight": __import__("numpy").zeros((200, 64), "float16")}, str(folder / "model.safetensors"))
    draft = resolve_draft(str(folder), _target())
    assert draft.kind == "model" and draft.weight_bytes == 200 * 64 * 2
    assert json.loads((folder / "config.json").read_text())["vocab_size"] == 200


def test_a_head_for_a_run_is_paired_and_checked_against_its_target(smollm2_path):
    """role "head", purpose "run", with the target's path: auto pairs, a catalogue id or the shipped head's id
    is found on this machine, and a head for another model is refused before anything loads."""
    auto = resolve(None, "head", "run", target_path=str(smollm2_path))
    assert auto.source == "auto:shipped" and auto.path.endswith("smollm2-135m-instruct") and auto.note is None
    assert resolve("auto", "head", "run", target_path=str(smollm2_path)).path == auto.path
    assert resolve("homespec-eagle3.1-smollm2-135m", "head", "run", target_path=str(smollm2_path)).path == auto.path
    none = resolve("none", "head", "run", target_path=str(smollm2_path))
    assert (none.path, none.source, none.note) == (None, "none", None)
    with pytest.raises(UsageError, match="eagle3-kimi-k2 does not fit .*: hidden size 7168 vs 576"):
        resolve("eagle3-kimi-k2", "head", "run", target_path=str(smollm2_path))
