"""Published heads' config.json (tests/data/heads/, provenance in its README), with weights generated at a
reduced width: the same layout (original EAGLE-3 `midlayer.*` or speculators `layers.0.*`), the same
key names and flags (norm_before_fc's input_norm, the embedding copy speculators ships), every width
scaled down so a test builds one in milliseconds."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np

DATA = Path(__file__).parent / "data" / "heads"
# the reduced widths: the tiny target of tests/tiny_models.py (SmolLM2's vocabulary, 8 layers of 64)
N_LAYER, HIDDEN, VOCAB, DRAFT_VOCAB, FF = 8, 64, 49152, 512, 128
FIXTURES = sorted(p.name for p in DATA.iterdir() if (p / "config.json").is_file())


def published(name: str) -> dict:
    return json.loads((DATA / name / "config.json").read_text())


def layer_of(cfg: dict) -> dict:
    """The decoder layer's settings: nested under transformer_layer_config (speculators) or top level."""
    nested = cfg.get("transformer_layer_config")
    return nested if isinstance(nested, dict) else cfg


def is_speculators(cfg: dict) -> bool:
    return isinstance(cfg.get("transformer_layer_config"), dict)


def reduced(cfg: dict) -> dict:
    """`cfg` with every width scaled down to the tiny target's; layout, keys and flags kept. A head whose
    q width differs from its hidden size (Kimi-K2: 64 x 128 over 7168) keeps differing."""
    out = copy.deepcopy(cfg)
    layer = layer_of(out)
    heads, kv = layer["num_attention_heads"], layer.get("num_key_value_heads") or layer["num_attention_heads"]
    hd = layer.get("head_dim") or layer["hidden_size"] // heads
    layer.update(hidden_size=HIDDEN, num_attention_heads=4, num_key_value_heads=4 if kv == heads else 2,
                 head_dim=16 if heads * hd == layer["hidden_size"] else 24, intermediate_size=FF, vocab_size=VOCAB,
                 max_position_embeddings=2048)
    out["draft_vocab_size"] = DRAFT_VOCAB
    if out.get("target_hidden_size"):
        out["target_hidden_size"] = HIDDEN
    for holder in (out, out.get("eagle_config")):
        if isinstance(holder, dict) and holder.get("eagle_aux_hidden_state_layer_ids"):
            holder["eagle_aux_hidden_state_layer_ids"] = [2, N_LAYER // 2, N_LAYER - 3]
    return out


def weights(cfg: dict, seed: int = 0) -> dict[str, np.ndarray]:
    """Tensors under the layout's own names ([out, in], as the checkpoints store them)."""
    rng = np.random.default_rng(seed)
    layer = layer_of(cfg)
    h, ff, v, dv = layer["hidden_size"], layer["intermediate_size"], layer["vocab_size"], cfg["draft_vocab_size"]
    q, kv = layer["num_attention_heads"] * layer["head_dim"], layer["num_key_value_heads"] * layer["head_dim"]
    p = "layers.0." if is_speculators(cfg) else "midlayer."

    def mat(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) / cols ** 0.5).astype(np.float32)

    def norm(n: int) -> np.ndarray:
        return (1 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    w = {"fc.weight": mat(h, 3 * h), f"{p}self_attn.q_proj.weight": mat(q, 2 * h),
         f"{p}self_attn.k_proj.weight": mat(kv, 2 * h), f"{p}self_attn.v_proj.weight": mat(kv, 2 * h),
         f"{p}self_attn.o_proj.weight": mat(h, q), f"{p}mlp.gate_proj.weight": mat(ff, h),
         f"{p}mlp.up_proj.weight": mat(ff, h), f"{p}mlp.down_proj.weight": mat(h, ff),
         f"{p}input_layernorm.weight": norm(h), f"{p}hidden_norm.weight": norm(h),
         f"{p}post_attention_layernorm.weight": norm(h), "norm.weight": norm(h), "lm_head.weight": mat(dv, h)}
    if cfg.get("norm_before_fc"):
        w["input_norm.weight"] = norm(3 * h)
    if is_speculators(cfg):  # speculators saves the verifier's embeddings beside the head
        w["embed_tokens.weight"] = mat(v, h)
    ids = np.sort(rng.choice(v, dv, replace=False))
    w["d2t"] = (ids - np.arange(dv)).astype(np.int64)
    t2d = np.zeros(v, dtype=bool)
    t2d[ids] = True
    w["t2d"] = t2d
    return w


def write_head(folder: Path, cfg: dict, seed: int = 0) -> Path:
    """config.json and model.safetensors of a head in `folder`."""
    from safetensors.numpy import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    save_file(weights(cfg, seed), str(folder / "model.safetensors"))
    return folder
