"""homespec.sources.names (the --model spellings) and homespec.sources.pick (llama.cpp's -hf rule):
pure functions, no disk and no network."""

from __future__ import annotations

import pytest

from homespec.errors import UsageError
from homespec.sources import names, pick


def test_names_cover_every_spelling():
    assert names.parse("bartowski/Llama-3.2-1B-Instruct-GGUF") == names.HubRef("bartowski/Llama-3.2-1B-Instruct-GGUF")
    assert names.parse("org/repo:q8_0") == names.HubRef("org/repo", tag="q8_0")
    assert names.parse("org/repo/sub/m-Q4_K_M.gguf") == names.HubRef("org/repo", file="sub/m-Q4_K_M.gguf")
    assert names.parse("hf.co/org/repo:Q4_K_M") == names.HubRef("org/repo", tag="Q4_K_M")
    assert names.parse("https://huggingface.co/org/repo/blob/v1/m.gguf") == names.HubRef("org/repo", file="m.gguf", revision="v1")
    assert names.parse("https://huggingface.co/org/repo") == names.HubRef("org/repo")
    assert names.parse("ollama:llama3.2") == names.OllamaRef("registry.ollama.ai", "library", "llama3.2", "latest")
    assert names.parse("ollama:hf.co/org/repo:Q4_K_M") == names.OllamaRef("hf.co", "org", "repo", "Q4_K_M")
    assert names.parse("lmstudio:pub/repo:Q8_0") == names.LMStudioRef("pub", "repo", tag="Q8_0")
    for not_a_source in ("llama-3.1-8b-q4", "./org/repo", "models/x.gguf", "https://example.com/m.gguf", "a--b/c"):
        assert names.parse(not_a_source) is None, not_a_source


def test_quant_rule_follows_llama_cpp():
    files = ["README.md", "m-F16.gguf", "m-Q8_0.gguf", "m-Q4_K_M.gguf", "mmproj-m-F16.gguf"]
    assert pick.pick_file("o/r", files, None) == "m-Q4_K_M.gguf"  # the default tag
    assert pick.pick_file("o/r", files[:3], None) == "m-Q8_0.gguf"  # then Q8_0
    assert pick.pick_file("o/r", files, "f16") == "m-F16.gguf"  # case-insensitive, mmproj never a model
    split = ["Q4_K_M/m-Q4_K_M-00002-of-00002.gguf", "Q4_K_M/m-Q4_K_M-00001-of-00002.gguf"]
    first = pick.pick_file("o/r", split, None)
    assert first == "Q4_K_M/m-Q4_K_M-00001-of-00002.gguf"
    assert pick.parts_of(first, split) == sorted(split)
    with pytest.raises(UsageError, match="has no Q2_K file; it has: F16, Q4_K_M, Q8_0"):
        pick.pick_file("o/r", files, "Q2_K")
    with pytest.raises(UsageError, match="matches 2 files: a-Q4_K_M.gguf, b-Q4_K_M.gguf"):
        pick.pick_file("o/r", ["a-Q4_K_M.gguf", "b-Q4_K_M.gguf"], None)


def test_bad_source_names_are_usage_errors():
    with pytest.raises(UsageError, match="is not an Ollama model name"):
        names.parse("ollama:a/b/c/d")
    with pytest.raises(UsageError, match="is not a quant tag"):
        names.parse("org/repo:Q4 K M")
    with pytest.raises(UsageError, match="is not an LM Studio model name"):
        names.parse("lmstudio:just-one")


def test_split_names_and_tags_as_llama_cpp_reads_them():
    info = pick.split_info("Q8_0/Model-Q8_0-00002-of-00003.gguf")
    assert (info.prefix, info.tag, info.index, info.count) == ("Q8_0/Model-Q8_0", "Q8_0", 2, 3)
    assert pick.split_info("model.f16.gguf").tag == "F16" and pick.split_info("README.md") is None
    assert not pick.is_model_file("imatrix-m.gguf") and not pick.is_model_file("eagle3-m-F16.gguf")
    assert pick.choices(["b-00002-of-00002.gguf", "b-00001-of-00002.gguf", "x.gguf"]) == ["b-00001-of-00002.gguf", "x.gguf"]
