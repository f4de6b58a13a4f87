"""`homespec draft export`: llama.cpp's eagle3 GGUF (loaded and drafted with by the pinned llama.cpp),
the EAGLE-3 twin of the shipped 3.1 head, the speculators layout, and importing both layouts back."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from homespec.cli import main
from homespec.nets.eagle3 import Eagle3Config, Eagle3Head, load_head, save_head
from tiny_heads import gguf_arch

N_LAYER, H, V, DV = 8, 64, 49152, 512


@pytest.fixture(scope="module")
def tiny_target(tmp_path_factory):
    """An 8-layer random Llama GGUF with the real SmolLM2 tokenizer (tests/tiny_models.py)."""
    from tiny_models import make_tiny_gguf

    return make_tiny_gguf(tmp_path_factory.mktemp("target") / "tiny.gguf", n_layer=N_LAYER, n_embd=H)


def _head(seed: int = 0, **kw) -> Eagle3Head:
    cfg = Eagle3Config(hidden_size=H, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                       intermediate_size=128, vocab_size=V, draft_vocab_size=DV, target_hidden_size=H,
                       rms_norm_eps=1e-5, **kw)
    torch.manual_seed(seed)
    head = Eagle3Head(cfg)
    with torch.no_grad():
        for name, p in head.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / p.shape[-1] ** 0.5)
        ids = torch.randperm(V, generator=torch.Generator().manual_seed(seed))[:DV].sort().values
        head.d2t.copy_(ids - torch.arange(DV))
        head.t2d.zero_()
        head.t2d[ids] = True
    return head.eval()


@pytest.fixture(scope="module")
def tiny_head_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("head") / "tiny-eagle3"
    save_head(_head(), d)
    return d


def _run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_gguf_export_loads_as_eagle3_and_drafts_like_homespec(tmp_path, capsys, tiny_target, tiny_head_dir):
    out = tmp_path / "head.gguf"
    code, stdout, err = _run(capsys, "draft", "export", str(tiny_head_dir), "--target", str(tiny_target),
                             "--out", str(out), "--format", "gguf")
    assert code == 0, err
    result = json.loads(stdout)
    assert result["kind"] == "eagle3" and result["bytes"] == out.stat().st_size
    assert gguf_arch(out) == "eagle3"
    # the export's own check ran llama.cpp's drafter on the file: every chain agrees with homespec's
    assert len(result["check"]) == 3
    assert all(c["agree"] == len(c["homespec"]) == 4 for c in result["check"]), result["check"]


def test_gguf_metadata_and_d2t_follow_the_converter(tmp_path, tiny_target):
    from gguf import GGUFReader

    from homespec.heads.gguf import read_target, write_eagle3_gguf

    head = _head(seed=1)
    out = tmp_path / "h.gguf"
    write_eagle3_gguf(head, read_target(tiny_target), out, dtype="f16", name="t")
    r = GGUFReader(str(out))
    f = {k: v.contents() for k, v in r.fields.items()}
    assert f["general.architecture"] == "eagle3"
    assert f["eagle3.target_layers"] == [2, N_LAYER // 2, N_LAYER - 3]
    assert f["eagle3.target_hidden_size"] == H and f["eagle3.block_count"] == 1
    assert f["eagle3.norm_before_fc"] is False and len(f["tokenizer.ggml.tokens"]) == V
    t = {x.name: x for x in r.tensors}
    assert "t2d" not in t and "blk.0.attn_norm_2.weight" in t and "fc.weight" in t
    # d2t holds absolute target ids, as int64
    assert np.array_equal(np.asarray(t["d2t"].data), head.draft_to_target.numpy())
    assert t["blk.0.attn_q.weight"].tensor_type.name == "F16" and t["output_norm.weight"].tensor_type.name == "F32"


def test_eagle3_1_head_exports_with_its_norms_and_drafts_like_homespec(tmp_path, capsys, tiny_target):
    """An EAGLE-3.1 head's GGUF carries fc_norm / norm_output (homespec's llama.cpp patch), and the
    patched llama.cpp drafts with it what homespec's torch drafter drafts (the export's own check)."""
    from gguf import GGUFReader

    d = tmp_path / "h31"
    save_head(_head(seed=7, fc_norm=True, norm_output=True), d)
    out = tmp_path / "x.gguf"
    code, stdout, err = _run(capsys, "draft", "export", str(d), "--target", str(tiny_target), "--out", str(out))
    assert code == 0, err
    result = json.loads(stdout)
    assert result["kind"] == "eagle3.1" and gguf_arch(out) == "eagle3"
    assert all(c["agree"] == len(c["homespec"]) == 4 for c in result["check"]), result["check"]
    r = GGUFReader(str(out))
    assert r.fields["eagle3.fc_norm"].contents() is True and r.fields["eagle3.norm_output"].contents() is True
    assert [int(x) for x in next(t for t in r.tensors if t.name == "fc_norm.weight").shape] == [H, 3]


def test_eagle3_1_export_needs_the_patched_build_for_its_check(tmp_path, capsys, tiny_target, monkeypatch):
    """With a llama.cpp that lacks the patch (a user's own build) the check cannot run: one line, before any load."""
    from homespec.backends.llamacpp import exports

    monkeypatch.setattr(exports, "eagle3_features", lambda lib=None: 0)
    d = tmp_path / "h31"
    save_head(_head(fc_norm=True, norm_output=True), d)
    code, out, err = _run(capsys, "draft", "export", str(d), "--target", str(tiny_target), "--out", str(tmp_path / "x.gguf"))
    assert code == 2 and out == ""
    assert err.startswith("error: ") and "EAGLE-3.1 patch" in err and "--eagle3-twin" in err and "--no-check" in err
    assert "Traceback" not in err and not (tmp_path / "x.gguf").exists()


def test_foreign_file_is_not_overwritten_without_force(tmp_path, capsys, tiny_target, tiny_head_dir):
    out = tmp_path / "mine.gguf"
    out.write_bytes(b"not homespec's")
    args = ["draft", "export", str(tiny_head_dir), "--target", str(tiny_target), "--out", str(out), "--no-check"]
    code, _, err = _run(capsys, *args)
    assert code == 2 and "--force" in err and out.read_bytes() == b"not homespec's"
    assert _run(capsys, *args, "--force")[0] == 0
    assert _run(capsys, *args)[0] == 0  # homespec's own export may be replaced


def test_twin_of_the_shipped_head_drafts_identically_in_llamacpp(tmp_path, smollm2_path):
    """The shipped EAGLE-3.1 head's twin: fc_norm folded with scales fitted on the target's
    features, exported, and drafted with by llama.cpp's own eagle3 graph."""
    from homespec.backends.tokenizer import load_tokenizer
    from homespec.embedded import DEFAULT_HEAD
    from homespec.heads.check import compare_chains
    from homespec.heads.gguf import read_target, write_eagle3_gguf
    from homespec.heads.twin import calibration_features, eagle3_twin, fc_norm_scales

    t = read_target(smollm2_path)
    head = load_head(DEFAULT_HEAD, t.n_layer, t.n_embd, t.n_vocab)
    feats = calibration_features(str(smollm2_path), head.config.feature_layers(t.n_layer), prompts=2, reply=4)
    scales = fc_norm_scales(feats, head.config.rms_norm_eps)
    assert scales.shape == (3,) and np.all(scales > 0)
    twin = eagle3_twin(head, scales)
    assert twin.config.norm_before_fc and not twin.config.fc_norm and not twin.config.norm_output
    out = tmp_path / "twin.gguf"
    write_eagle3_gguf(twin, t, out, dtype="f32", name="twin")
    assert gguf_arch(out) == "eagle3"
    tok = load_tokenizer(str(smollm2_path))
    pairs = compare_chains(twin, smollm2_path, out, [tok.encode(s) for s in ("The capital of France is",
                                                                                "def fib(n):\n    ")], k=4)
    for p in pairs:
        assert p.homespec == p.llamacpp or p.margin < 0.05, p


def test_fc_norm_scales_fit_the_per_feature_norm():
    """With features whose parts keep a fixed ratio of scales, the folded joint norm is exact."""
    from homespec.heads.twin import eagle3_twin, fc_norm_scales

    head = _head(seed=2, fc_norm=True)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 3, H, generator=g)
    x = x / x.pow(2).mean(-1, keepdim=True).sqrt() * torch.tensor([0.5, 3.0, 20.0])[None, :, None]
    feats = x.reshape(16, 3 * H)
    twin = eagle3_twin(head, fc_norm_scales(feats.numpy(), head.config.rms_norm_eps))
    with torch.no_grad():
        assert torch.allclose(twin.project(feats), head.project(feats), atol=1e-4)


def test_speculators_export_matches_the_documented_schema_and_loads_back(tmp_path, capsys, tiny_target):
    d = tmp_path / "h31"
    src = _head(seed=3, fc_norm=True, norm_output=True)
    save_head(src, d)
    out = tmp_path / "spec"
    code, stdout, err = _run(capsys, "draft", "export", str(d), "--target", str(tiny_target), "--out", str(out),
                             "--format", "speculators", "--verifier", "org/tiny")
    assert code == 0, err
    cfg = json.loads((out / "config.json").read_text())
    _check_speculators_schema(cfg)
    assert cfg["fc_norm"] and cfg["norm_output"] and cfg["speculators_config"]["verifier"]["name_or_path"] == "org/tiny"
    from safetensors import safe_open

    with safe_open(str(out / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    assert {"fc.weight", "fc_norm.0.weight", "layers.0.hidden_norm.weight", "lm_head.weight", "d2t", "t2d"} <= keys
    assert not any(k.startswith("midlayer.") for k in keys)
    # import: the speculators layout loads into homespec and computes what the source head computes
    back = load_head(out, N_LAYER, H, V)
    feats, emb = torch.randn(5, 3 * H), torch.randn(5, H)
    for h in (src, back):
        assert h.config.fc_norm and h.config.norm_output
    with torch.no_grad():
        a = src(emb, src.project(feats), torch.arange(5), src.new_cache(8), torch.tril(torch.ones(5, 5, dtype=torch.bool)))
        b = back(emb, back.project(feats), torch.arange(5), back.new_cache(8), torch.tril(torch.ones(5, 5, dtype=torch.bool)))
    assert torch.allclose(a[1], b[1], atol=1e-6) and torch.equal(back.draft_to_target, src.draft_to_target)
    from homespec.formats.eagle import draft_spec_from_checkpoint

    spec = draft_spec_from_checkpoint(out)
    assert spec.kind == "eagle3.1" and spec.draft_vocab == DV and spec.n_embd == H


def _check_speculators_schema(cfg: dict) -> None:
    """The fields and rules of speculators 0.9.0's Eagle3SpeculatorConfig / SpeculatorsConfig
    (src/speculators/models/eagle3/config.py, src/speculators/config.py, proposals/greedy.py):
    the package itself cannot be installed beside torch 2.13 (its dependencies pull torch 2.14)."""
    assert cfg["speculators_model_type"] == "eagle3" and cfg["architectures"] == ["Eagle3Speculator"]
    layer = cfg["transformer_layer_config"]
    assert isinstance(layer, dict) and layer["model_type"] == "llama" and layer["num_hidden_layers"] == 1
    for key in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "vocab_size"):
        assert isinstance(layer[key], int) and layer[key] > 0
    assert isinstance(cfg["draft_vocab_size"], int) and isinstance(cfg["target_hidden_size"], int)
    for flag in ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output"):
        assert isinstance(cfg[flag], bool)
    assert not (cfg["norm_before_fc"] and cfg["fc_norm"])  # mutually exclusive in speculators
    ids = cfg["eagle_aux_hidden_state_layer_ids"]
    assert ids and all(isinstance(i, int) and i >= 1 for i in ids) and len(set(ids)) == len(ids)
    sc = cfg["speculators_config"]
    assert sc["algorithm"] == "eagle3" and sc["default_proposal_method"] == "greedy"
    (prop,) = sc["proposal_methods"]
    assert prop["proposal_type"] == "greedy" and prop["speculative_tokens"] >= 1 and prop["verifier_accept_k"] >= 1
    assert isinstance(sc["verifier"]["name_or_path"], str) and isinstance(sc["verifier"]["architectures"], list)


def test_hf_export_of_the_twin_loads_in_homespec(tmp_path, tiny_target):
    from homespec.heads.speculators import write
    from homespec.heads.twin import eagle3_twin

    twin = eagle3_twin(_head(seed=4, fc_norm=True, norm_output=True), [1.5, 1.0, 0.5])
    out = tmp_path / "twin"
    write(twin, out, fmt="hf", dtype="f32", target=str(tiny_target), layers=(2, 4, 5), name="twin")
    back = load_head(out, N_LAYER, H, V)
    assert back.config.norm_before_fc and not back.config.fc_norm
    assert torch.equal(back.input_norm.weight, twin.input_norm.weight)


def test_usage_errors_come_before_any_load(tmp_path, capsys, tiny_head_dir):
    code, _, err = _run(capsys, "draft", "export", str(tiny_head_dir), "--out", str(tmp_path), "--format", "gguf")
    assert code == 2 and "directory" in err
    code, _, err = _run(capsys, "draft", "export", str(tiny_head_dir), "--out", str(tmp_path / "x"), "--format", "onnx")
    assert code == 2 and "gguf, speculators, hf" in err


def test_twin_of_a_norm_output_head_needs_no_calibration(tmp_path, capsys, tiny_target):
    """norm_output alone: the twin only feeds the raw output forward; no fc_norm to fit, and the
    exported file drafts what the twin drafts in homespec."""
    d = tmp_path / "h"
    save_head(_head(seed=5, norm_output=True), d)
    out = tmp_path / "twin.gguf"
    code, stdout, err = _run(capsys, "draft", "export", str(d), "--target", str(tiny_target), "--out", str(out),
                             "--eagle3-twin")
    assert code == 0, err
    result = json.loads(stdout)
    assert result["kind"] == "eagle3-twin" and result["fc_norm_scales"] is None
    assert all(c["agree"] == len(c["homespec"]) for c in result["check"]), result["check"]
    assert "calibrating" not in err


def test_a_speculators_checkpoint_written_key_by_key_loads(tmp_path):
    """The speculators layout as speculators itself saves it (not via homespec's writer): nested
    transformer_layer_config, `layers.0.*`, the verifier's embeddings saved alongside, t2d/d2t."""
    from safetensors.torch import save_file

    src = _head(seed=6)
    w = {("layers.0." + k[len("midlayer."):] if k.startswith("midlayer.") else k): v.contiguous()
         for k, v in src.state_dict().items()}
    w["embed_tokens.weight"] = torch.randn(V, H)
    d = tmp_path / "spec"
    d.mkdir()
    save_file(w, str(d / "model.safetensors"))
    cfg = {"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3", "speculators_version": "0.9.0",
           "draft_vocab_size": DV, "norm_before_residual": False, "target_hidden_size": None,
           "eagle_aux_hidden_state_layer_ids": [1, 4, 6],
           "transformer_layer_config": {"model_type": "llama", "hidden_size": H, "intermediate_size": 128,
                                        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                                        "num_hidden_layers": 1, "rms_norm_eps": 1e-5, "vocab_size": V,
                                        "rope_theta": 10000.0, "max_position_embeddings": 2048},
           "speculators_config": {"algorithm": "eagle3", "default_proposal_method": "greedy",
                                  "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
                                  "verifier": {"name_or_path": "org/target", "architectures": ["LlamaForCausalLM"]}}}
    (d / "config.json").write_text(json.dumps(cfg))
    head = load_head(d, N_LAYER, H, V)
    assert head.config.feature_layers(N_LAYER) == (1, 4, 6) and head.embed_tokens is None
    assert torch.equal(head.midlayer.self_attn.q_proj.weight, src.midlayer.self_attn.q_proj.weight)
    assert torch.equal(head.draft_to_target, src.draft_to_target)
