"""Small EAGLE-3 / EAGLE-3.1 head directories in every layout homespec reads, with the real key names
and config shapes of the published checkpoints, at reduced width (numpy, seeded):

* "homespec": homespec's own (published EAGLE-3 names, `midlayer.*`, config.json as
  homespec.nets.eagle3.save_head writes it, model.safetensors);
* "eagle3": the original EAGLE-3 release (SafeAILab / yuhuili): LlamaForCausalLMEagle3 config
  without target_hidden_size, pytorch_model.bin (torch.save), `midlayer.*`, d2t / t2d;
* "eagle3-model": original checkpoints that name the layer `model.layers.0.*`;
* "speculators": vLLM speculators (0.9.0): nested transformer_layer_config, `layers.0.*`,
  `fc_norm.{0,1,2}.weight` (3.1), the verifier's embeddings saved alongside.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def head_arrays(*, h: int, ht: int, n_head: int, n_kv: int, head_dim: int, ff: int, vocab: int, draft_vocab: int,
                fc_norm: bool, seed: int) -> dict[str, np.ndarray]:
    """Published-name float32 weights (norms near 1, matrices scaled by 1/sqrt(fan-in)) and int64 d2t offsets."""
    rng = np.random.default_rng(seed)

    def mat(o: int, i: int) -> np.ndarray:
        return (rng.standard_normal((o, i)) / np.sqrt(i)).astype(np.float32)

    def norm(n: int) -> np.ndarray:
        return (1 + 0.2 * rng.standard_normal(n)).astype(np.float32)

    q, kv = n_head * head_dim, n_kv * head_dim
    w = {"fc.weight": mat(h, 3 * ht), "norm.weight": norm(h), "lm_head.weight": mat(draft_vocab, h),
         "midlayer.self_attn.q_proj.weight": mat(q, 2 * h), "midlayer.self_attn.k_proj.weight": mat(kv, 2 * h),
         "midlayer.self_attn.v_proj.weight": mat(kv, 2 * h), "midlayer.self_attn.o_proj.weight": mat(h, q),
         "midlayer.mlp.gate_proj.weight": mat(ff, h), "midlayer.mlp.up_proj.weight": mat(ff, h),
         "midlayer.mlp.down_proj.weight": mat(h, ff), "midlayer.hidden_norm.weight": norm(h),
         "midlayer.input_layernorm.weight": norm(h), "midlayer.post_attention_layernorm.weight": norm(h)}
    if fc_norm:
        w.update({f"fc_norm.{i}.weight": norm(ht) for i in range(3)})
    ids = np.sort(rng.permutation(vocab)[:draft_vocab]).astype(np.int64)
    w["d2t"] = ids - np.arange(draft_vocab, dtype=np.int64)
    t2d = np.zeros(vocab, np.bool_)
    t2d[ids] = True
    w["t2d"] = t2d
    return w


def _config(layout: str, *, h: int, ht: int, n_head: int, n_kv: int, head_dim: int, ff: int, vocab: int,
            draft_vocab: int, fc_norm: bool, norm_output: bool, window: int | None) -> dict:
    layer = {"hidden_size": h, "num_attention_heads": n_head, "num_key_value_heads": n_kv, "head_dim": head_dim,
             "intermediate_size": ff, "vocab_size": vocab, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
             "max_position_embeddings": 2048, "num_hidden_layers": 1, "model_type": "llama", "hidden_act": "silu"}
    if layout == "speculators":
        return {"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3",
                "speculators_version": "0.9.0", "transformer_layer_config": {**layer, "architectures": ["LlamaForCausalLM"]},
                "draft_vocab_size": draft_vocab, "target_hidden_size": ht, "norm_before_residual": False,
                "norm_before_fc": False, "fc_norm": fc_norm, "norm_output": norm_output,
                "speculators_config": {"algorithm": "eagle3", "default_proposal_method": "greedy",
                                       "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
                                       "verifier": {"name_or_path": "org/target", "architectures": ["LlamaForCausalLM"]}}}
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], **layer, "draft_vocab_size": draft_vocab,
           "tie_word_embeddings": False, "torch_dtype": "float16"}
    if layout == "homespec":
        cfg.update(target_hidden_size=ht, fc_norm=fc_norm, norm_output=norm_output, norm_before_residual=False)
        if window is not None:
            cfg["draft_window"] = window
    elif ht != h:
        cfg["target_hidden_size"] = ht
    return cfg


def _rename(layout: str, key: str) -> str:
    if layout == "speculators" and key.startswith("midlayer."):
        return "layers.0." + key[len("midlayer."):]
    if layout == "eagle3-model" and key.startswith("midlayer."):
        return "model.layers.0." + key[len("midlayer."):]
    return key


def make_head_dir(path: str | Path, layout: str = "homespec", *, h: int = 64, ht: int = 64, n_head: int = 4,
                  n_kv: int = 2, head_dim: int = 16, ff: int = 128, vocab: int = 49152, draft_vocab: int = 512,
                  fc_norm: bool = False, norm_output: bool = False, window: int | None = None, seed: int = 0,
                  embed: bool = False) -> tuple[Path, dict[str, np.ndarray]]:
    """Write a head directory in `layout`; returns it and its weights in published names (float32)."""
    d = Path(path)
    d.mkdir(parents=True, exist_ok=True)
    if layout in ("eagle3", "eagle3-model") and (fc_norm or norm_output):
        raise ValueError("the original EAGLE-3 layouts hold 3.0 heads")
    w = head_arrays(h=h, ht=ht, n_head=n_head, n_kv=n_kv, head_dim=head_dim, ff=ff, vocab=vocab,
                    draft_vocab=draft_vocab, fc_norm=fc_norm, seed=seed)
    if embed:
        w["embed_tokens.weight"] = np.random.default_rng(seed + 1).standard_normal((vocab, h)).astype(np.float32)
    cfg = _config(layout, h=h, ht=ht, n_head=n_head, n_kv=n_kv, head_dim=head_dim, ff=ff, vocab=vocab,
                  draft_vocab=draft_vocab, fc_norm=fc_norm, norm_output=norm_output, window=window)
    (d / "config.json").write_text(json.dumps(cfg, indent=1))
    stored = {_rename(layout, k): v for k, v in w.items()}
    if layout == "eagle3":
        import torch

        torch.save({k: torch.from_numpy(v.copy()) for k, v in stored.items()}, str(d / "pytorch_model.bin"))
    else:
        from safetensors.numpy import save_file

        save_file(stored, str(d / "model.safetensors"))
    return d, w


def gguf_arch(path) -> str:
    """general.architecture of a GGUF as llama.cpp itself loads it (asserting that it loads)."""
    import ctypes

    import llama_cpp as ll

    model = ll.llama_model_load_from_file(str(path).encode(), ll.llama_model_default_params())
    assert model, f"llama.cpp could not load {path}"
    try:
        buf = ctypes.create_string_buffer(64)
        ll.llama_model_meta_val_str(model, b"general.architecture", buf, 64)
        return buf.value.decode()
    finally:
        ll.llama_model_free(model)
