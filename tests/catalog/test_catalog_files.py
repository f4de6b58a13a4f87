"""Catalogue entries of the new families: optional keys, and published GGUF sizes ([[model.file]])."""

from __future__ import annotations

import pytest

from homespec.catalog import Catalog, ModelEntry, PublishedFile, _model_keys, _model_spec
from homespec.errors import HomespecError

QWEN3_30B_A3B = dict(  # https://huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json
    id="qwen3-30b-a3b", name="Qwen3-30B-A3B", arch="qwen3moe", n_layer=48, n_embd=2048, n_head=32, n_head_kv=4,
    head_dim=128, n_ff=6144, n_vocab=151936, n_ctx_train=40960, rope_theta=1e6, tied=False, n_expert=128,
    n_expert_used=8, n_ff_exp=768, source="https://huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json",
)
UD = PublishedFile("UD-Q4_K_XL", 17_715_663_872, "unsloth/Qwen3-30B-A3B-GGUF", "test figure")


def _catalog(entry: dict, files=()) -> Catalog:
    return Catalog((), {}, (ModelEntry(entry["id"], _model_spec(entry), _model_keys(entry), tuple(files)),), ())


def test_moe_entry_predicts_its_experts():
    m = _catalog(QWEN3_30B_A3B).model("qwen3-30b-a3b-q4")
    assert m.is_moe and m.quant == "Q4_K_M"
    assert sum(t.n_bytes for t in m.tensors) == 18_550_716_416


def test_a_published_mix_takes_the_files_exact_size():
    m = _catalog(QWEN3_30B_A3B, [UD]).model("qwen3-30b-a3b-ud-q4_k_xl")
    assert m.quant == "UD-Q4_K_XL" and m.file_bytes == UD.bytes
    assert sum(t.n_bytes for t in m.tensors) == pytest.approx(UD.bytes, abs=len(m.tensors))
    assert "UD-Q4_K_XL file size" in m.source


def test_a_plain_file_type_is_still_predicted_tensor_by_tensor():
    plain = PublishedFile("Q4_K_M", 18_556_685_824)
    m = _catalog(QWEN3_30B_A3B, [plain]).model("qwen3-30b-a3b-q4_k_m")
    assert sum(t.n_bytes for t in m.tensors) == 18_550_716_416  # the file's header is not weights


def test_an_architecture_without_a_layout_loads_and_says_so_when_planned():
    entry = dict(QWEN3_30B_A3B, id="future-moe", name="Future-MoE", arch="futuremoe")
    cat = _catalog(entry)
    with pytest.raises(HomespecError, match="cannot predict the tensors of a 'futuremoe'"):
        cat.model("future-moe-q4")
