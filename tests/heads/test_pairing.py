"""Heads pair with their targets at run time (homespec.sources.pairing): the tokenizer hash, target
identities from headers alone, the choice `--draft auto` makes on this machine, the one line that
names a head to fetch, and the refusal of a head that does not fit, before anything loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from homespec.cli import main
from homespec.formats.tokenizer_hash import gguf_tokenizer_digest, gguf_tokens_digest, json_tokenizer_digest
from homespec.sources.identity import mismatch, path_identity, target_identity
from homespec.sources.pairing import pair
from published_heads import HIDDEN, N_LAYER, published, reduced, write_head

REPO = Path(__file__).resolve().parents[2]


def header_gguf(path: Path, *, name: str, arch: str = "llama", n_layer: int = 32, n_embd: int = 4096,
                n_vocab: int = 128256) -> Path:
    """A GGUF with a model's metadata and no weights: enough for every identity (which reads headers only)."""
    from gguf import GGUFWriter

    w = GGUFWriter(str(path), arch)
    w.add_name(name)
    w.add_block_count(n_layer), w.add_embedding_length(n_embd), w.add_head_count(32), w.add_head_count_kv(8)
    w.add_feed_forward_length(14336), w.add_context_length(8192), w.add_vocab_size(n_vocab)
    w.write_header_to_file(), w.write_kv_data_to_file(), w.close()
    return path


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("HOMESPEC_HEADS", raising=False)
    return tmp_path / "hub"


@pytest.fixture(scope="module")
def tiny_target(tmp_path_factory):
    from tiny_models import make_tiny_gguf

    return make_tiny_gguf(tmp_path_factory.mktemp("target") / "tiny.gguf", n_layer=N_LAYER, n_embd=HIDDEN)


# --- the tokenizer hash ------------------------------------------------------------------------------

def test_the_hash_of_a_gguf_equals_that_of_its_tokenizer_json(smollm2_path, tmp_path):
    from tiny_models import write_hf_tokenizer

    write_hf_tokenizer(tmp_path, smollm2_path)
    assert json_tokenizer_digest(tmp_path / "tokenizer.json") == gguf_tokenizer_digest(smollm2_path)


def test_padding_and_space_marks_are_read_as_the_converter_writes_them():
    tokens = ["<s>", "\u2581the", "a b"]
    assert gguf_tokens_digest(tokens + ["[PAD3]", "[PAD4]"]) == gguf_tokens_digest(tokens)
    assert gguf_tokens_digest(["<s>", " the", "a b"]) == gguf_tokens_digest(tokens)
    assert gguf_tokens_digest(["<s>", "\u2581the", "a c"]) != gguf_tokens_digest(tokens)
    assert gguf_tokens_digest(["<s>", "a b", "\u2581the"]) != gguf_tokens_digest(tokens)  # ids matter


# --- identities and the comparison ---------------------------------------------------------------

def test_a_target_identity_comes_from_its_header(tmp_path):
    t = target_identity(header_gguf(tmp_path / "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf",
                                    name="Meta Llama 3.1 8B Instruct"))
    assert (t.arch, t.n_layer, t.n_embd, t.n_vocab) == ("llama", 32, 4096, 128256)
    assert "meta-llama-3.1-8b-instruct" in t.names


def test_each_mismatch_is_named(tmp_path, tiny_target):
    from homespec.catalog import load_catalog
    from homespec.sources.identity import entry_identity

    target = target_identity(tiny_target)
    cat = load_catalog()
    assert mismatch(entry_identity(cat.draft_entry("eagle3-llama3.1-8b")), target) == "hidden size 4096 vs 64"
    llama = target_identity(header_gguf(tmp_path / "l.gguf", name="x", n_layer=40))
    assert mismatch(entry_identity(cat.draft_entry("eagle3-llama3.1-8b")), llama) == \
        "made for a 32-layer model, this one has 40"
    cfg = reduced(published("kimi-k2-instruct-eagle3"))
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [2, 30, 58]
    assert mismatch(path_identity(write_head(tmp_path / "k", cfg)), target) == "reads layers [2, 30, 58], this model has 8"


# --- --draft auto ----------------------------------------------------------------------------------

def test_the_embedded_model_drafts_with_the_shipped_head(smollm2_path):
    p = pair(smollm2_path)
    assert p.where == "shipped" and (p.head / "config.json").is_file() and p.note is None


def test_a_copy_of_the_embedded_model_pairs_by_its_vocabulary(smollm2_path, tmp_path, empty_cache):
    copy = tmp_path / "model.gguf"  # a name that says nothing: the tokenizer hash pairs it
    os.link(smollm2_path, copy)
    p = pair(copy)
    assert (p.where, p.entry) == ("shipped", "homespec-eagle3.1-smollm2-135m") and p.head.name == "smollm2-135m-instruct"


def test_a_catalogue_head_that_is_not_here_is_named_with_its_fetch_command(tmp_path, empty_cache):
    model = header_gguf(tmp_path / "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf", name="Meta Llama 3.1 8B Instruct")
    p = pair(model)
    assert p.head is None and p.entry == "eagle3-llama3.1-8b"
    assert p.note.startswith("note: eagle3-llama3.1-8b (yuhuili/EAGLE3-LLaMA3.1-Instruct-8B) drafts for ")
    assert p.note.endswith("Fetch it with: homespec pull eagle3-llama3.1-8b") and "\n" not in p.note


def test_one_shape_two_models_are_told_apart_by_name(tmp_path, empty_cache):
    distill = header_gguf(tmp_path / "DeepSeek-R1-Distill-Llama-8B-Q4_K_M.gguf", name="DeepSeek R1 Distill Llama 8B")
    assert pair(distill).entry == "eagle3-deepseek-r1-distill-llama-8b"
    other = header_gguf(tmp_path / "some-8b.gguf", name="Some Model 8B")  # Llama-3.1-8B's shape, another model
    assert pair(other).entry is None and pair(other).note is None


def test_the_head_in_the_hub_cache_is_the_one_used(tmp_path, empty_cache):
    snap = empty_cache / "models--RedHatAI--Llama-3.1-8B-Instruct-speculator.eagle3" / "snapshots" / ("a" * 40)
    cfg = published("redhat-llama3.1-8b")
    (snap.parent.parent / "refs").mkdir(parents=True)
    (snap.parent.parent / "refs" / "main").write_text("a" * 40)
    _write_shape_only(snap, cfg)
    model = header_gguf(tmp_path / "Llama-3.1-8B-Instruct-Q8_0.gguf", name="Llama 3.1 8B Instruct")
    p = pair(model)
    assert (p.head, p.entry, p.where, p.note) == (snap, "redhat-eagle3-llama3.1-8b", "hf-cache", None)


def _write_shape_only(folder: Path, cfg: dict) -> None:
    """A head's config.json with its d2t / t2d at full size (what its identity is read from), no layer weights."""
    import numpy as np
    from safetensors.numpy import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    vocab = cfg["transformer_layer_config"]["vocab_size"]
    save_file({"d2t": np.zeros(cfg["draft_vocab_size"], np.int64), "t2d": np.zeros(vocab, bool)},
              str(folder / "model.safetensors"))


@pytest.fixture
def model_with_sidecar(tmp_path, tiny_target) -> Path:
    """The tiny target in a folder beside an eagle3-*.gguf made for it (head_gguf, from a reduced head)."""
    import shutil

    from homespec.backends.llamacpp.head_convert import head_gguf

    folder = tmp_path / "repo"
    folder.mkdir()
    model = folder / "tiny-Q4_K_M.gguf"
    os.link(tiny_target, model)
    head = write_head(tmp_path / "h", reduced(published("redhat-qwen3-8b")))
    shutil.copy(head_gguf(head, tiny_target, dtype="f16", cache_dir=tmp_path / "cache").path,
                folder / "eagle3-tiny-F16.gguf")
    return model


def test_a_sidecar_beside_the_model_is_used_when_it_carries_its_vocabulary(model_with_sidecar, empty_cache):
    p = pair(model_with_sidecar)
    assert (p.head, p.where) == (model_with_sidecar.parent / "eagle3-tiny-F16.gguf", "sidecar")


def test_a_paired_gguf_head_drafts_in_llamacpp(model_with_sidecar, capsys, empty_cache):
    """The sidecar runs beside the llama.cpp target: eagle3 drafts with it (the same greedy answer as
    plain decoding), and auto carries it beside its lookups."""
    def run(*more: str) -> dict:
        args = ["generate", "--model", str(model_with_sidecar), "--no-chat", "-p", "a b a b a b", "-n", "8",
                "--json", *more]
        assert main(args) == 0
        return json.loads(capsys.readouterr().out.splitlines()[-1])

    plain, eagle = run("--method", "none"), run("--method", "eagle3", "--no-guard")
    assert eagle["token_ids"] == plain["token_ids"]
    assert eagle["guard"]["drafters"]["eagle3"]["drafted"] > 0
    assert run()["method"] == "auto"


# --- --draft on the command line --------------------------------------------------------------------

def test_a_head_for_another_model_is_refused_before_anything_loads(smollm2_path):
    """generate --draft eagle3-llama3.1-8b on the embedded model: one line, exit 2, and llama.cpp never
    imported (no weights, not even a vocabulary, were loaded)."""
    code = ("import sys; from homespec.cli import main; rc = main(['generate', '--draft', 'eagle3-llama3.1-8b', "
            "'-p', 'hi', '-n', '4']); print('llama_cpp loaded' if 'llama_cpp' in sys.modules else 'nothing loaded'); "
            "sys.exit(rc)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 2, r.stderr
    assert r.stdout.strip() == "nothing loaded"
    lines = r.stderr.strip().splitlines()
    assert lines[0] == ("error: the draft head eagle3-llama3.1-8b does not fit SmolLM2-135M-Instruct.Q4_1.gguf: "
                        "hidden size 4096 vs 576") and lines[1].startswith("hint: ") and len(lines) == 2


def test_a_head_directory_that_does_not_fit_is_refused(tmp_path, capsys, smollm2_path):
    folder = write_head(tmp_path / "head", reduced(published("redhat-gpt-oss-20b")))
    code = main(["generate", "--draft", str(folder), "-p", "hi", "-n", "2"])
    err = capsys.readouterr().err
    assert code == 2 and "does not fit SmolLM2-135M-Instruct.Q4_1.gguf: hidden size 64 vs 576" in err


def test_auto_and_the_default_plan_alike(capsys, smollm2_path):
    rows = []
    for extra in ([], ["--draft", "auto"]):
        assert main(["plan", "--gpu", "none", "--json", *extra]) == 0
        rows.append(json.loads(capsys.readouterr().out)["draft"])
    assert rows[0] == rows[1] and rows[0]["kind"] == "eagle3.1"


def test_plan_of_a_model_whose_head_is_not_here_plans_that_head_and_says_so(tmp_path, capsys, empty_cache):
    from shaped_models import shaped_gguf

    model = shaped_gguf(tmp_path / "Qwen3-8B-Q4_0.gguf", name="Qwen3 8B", arch="qwen3", n_layer=36, n_embd=4096,
                        n_vocab=151936)  # a sparse file: Qwen3-8B's identity, no data
    assert main(["plan", "--gpu", "4090", "--json", "--model", str(model)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["draft"]["name"] == "eagle3-qwen3-8b"
    assert any("homespec pull eagle3-qwen3-8b" in n for n in out["notes"])


@pytest.mark.slow
def test_a_run_whose_head_is_not_here_says_how_to_fetch_it_once_and_drafts_with_lookups(tmp_path, empty_cache):
    """generate on a model with Llama-3.1-8B's identity (random Q4_0 weights, one narrow head): the note
    on stderr, once, and the answer, drafted with the lookups."""
    from shaped_models import shaped_gguf

    model = shaped_gguf(tmp_path / "Meta-Llama-3.1-8B-Instruct-Q4_0.gguf", name="Meta Llama 3.1 8B Instruct",
                        n_layer=32, n_embd=4096, n_vocab=128256, fill="random")
    r = subprocess.run([sys.executable, "-m", "homespec", "generate", "--model", str(model), "--no-chat", "-n", "6",
                        "-p", "the cat sat on the mat. the cat sat on the mat.", "--json"],
                       capture_output=True, text=True, timeout=600, cwd=REPO,
                       env={**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_CACHE": str(empty_cache)})
    assert r.returncode == 0, r.stderr[-2000:]
    notes = [line for line in r.stderr.splitlines() if "homespec pull" in line]
    assert notes == ["note: eagle3-llama3.1-8b (yuhuili/EAGLE3-LLaMA3.1-Instruct-8B) drafts for "
                     "Meta-Llama-3.1-8B-Instruct-Q4_0.gguf but is not on this machine; drafting with prompt "
                     "lookups. Fetch it with: homespec pull eagle3-llama3.1-8b"]
    row = json.loads(r.stdout.splitlines()[-1])
    assert row["method"] == "auto" and len(row["token_ids"]) == 6


def test_eagle3_without_a_head_here_names_the_pull_and_none_means_none(tmp_path, capsys, empty_cache):
    from shaped_models import shaped_gguf

    model = shaped_gguf(tmp_path / "Llama-3.1-8B-Instruct-Q4_0.gguf", name="Llama 3.1 8B Instruct", n_layer=32,
                        n_embd=4096, n_vocab=128256)  # sparse: refused before anything reads its weights
    assert main(["generate", "--model", str(model), "--method", "eagle3", "-p", "hi", "-n", "2"]) == 2
    err = capsys.readouterr().err
    assert "`homespec pull eagle3-llama3.1-8b` fetches it" in err and err.count("\n") == 2
    assert main(["generate", "--model", str(model), "--method", "eagle3", "--draft", "none", "-p", "hi"]) == 2
    assert "--draft none names none" in capsys.readouterr().err
    assert main(["generate", "--method", "draft", "--draft", "auto", "-p", "hi"]) == 2
    assert "--method draft needs a draft model" in capsys.readouterr().err


def test_draft_none_asks_for_nothing(tmp_path, empty_cache):
    from homespec.engine.options import RunOptions, auto_head

    model = header_gguf(tmp_path / "Meta-Llama-3.1-8B-Instruct.gguf", name="Meta Llama 3.1 8B Instruct")
    assert auto_head(RunOptions(model=str(model), draft="none"), str(model)) is None


def test_a_head_shipping_its_targets_tokenizer_json_is_held_to_it(tmp_path, tiny_target, smollm2_path):
    from tiny_models import write_hf_tokenizer

    folder = write_head(tmp_path / "head", reduced(published("redhat-qwen3-8b")))
    write_hf_tokenizer(folder, smollm2_path)  # the tiny target's vocabulary: SmolLM2's
    target = target_identity(tiny_target)
    assert path_identity(folder).tokenizer == target.tokenizer and mismatch(path_identity(folder), target) is None
    data = json.loads((folder / "tokenizer.json").read_text())
    vocab = data["model"]["vocab"]
    vocab["renamed"] = vocab.pop(next(t for t, i in vocab.items() if i == 1000))  # one token differs
    (folder / "tokenizer.json").write_text(json.dumps(data))
    why = mismatch(path_identity(folder), target)
    assert why is not None and why.startswith("tokenizer ") and why.endswith("(sha256 of the vocabulary)")
