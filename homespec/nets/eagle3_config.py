"""The configuration of an EAGLE-3 / EAGLE-3.1 draft head, and the names of its weights, without
torch: the head's config.json is read here by the torch head (homespec.nets.eagle3), by the
conversion to llama.cpp's eagle3 GGUF (homespec.backends.llamacpp.head_gguf) and by the planner.

Checkpoint layouts name the decoder layer differently: the published EAGLE-3 layout (SafeAILab,
homespec's own heads) `midlayer.*`, some original checkpoints `model.layers.0.*`, vLLM's
speculators `layers.0.*` (with the layer's shape nested under `transformer_layer_config`);
NeMo prefixes everything with `model.`. `canonical_key` maps them all to the published names.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping

from homespec.errors import FormatError
from homespec.nets.config import RopeScaling

_ALIASES = (("model.", ""), ("layers.0.", "midlayer."))


def canonical_key(key: str) -> str:
    """A checkpoint's weight name in the published EAGLE-3 layout (`midlayer.*`, `fc.weight`, ...)."""
    for old, new in _ALIASES:
        if key.startswith(old):
            key = new + key[len(old) :]
    return key


@dataclass(frozen=True, slots=True)
class Eagle3Config:
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int  # the target's vocabulary
    draft_vocab_size: int
    target_hidden_size: int  # width of each of the three target features
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling | None = None
    max_position_embeddings: int = 8192
    aux_layer_ids: tuple[int, ...] | None = None  # None: EAGLE-3's default [2, N//2, N-3]
    fc_norm: bool = False  # EAGLE-3.1: RMSNorm on each target feature before fc
    norm_output: bool = False  # EAGLE-3.1: the next draft step consumes norm(output)
    norm_before_residual: bool = False  # vLLM variant: the residual is hidden_norm(hidden)
    # llama.cpp's `norm_before_fc`: one RMSNorm over the whole [3*H_t] concatenation before fc
    # (weight `input_norm.weight`), where EAGLE-3.1's fc_norm normalises each feature alone.
    # The form homespec's EAGLE-3 twin of a 3.1 head takes (homespec/heads/twin.py).
    norm_before_fc: bool = False
    # homespec's key: the longest sequence the head was trained on. The drafter then attends to
    # that many newest entries (plus the first few) by default: beyond its training length a
    # head's acceptance is higher with the window than with full attention (docs/speculative.md).
    draft_window: int | None = None

    @classmethod
    def from_dict(cls, cfg: Mapping[str, Any], path: str = "") -> "Eagle3Config":
        """From a Llama-style config.json; unknown keys are ignored."""
        where = path or "config.json"
        if isinstance(cfg.get("transformer_layer_config"), dict):  # the speculators layout nests the layer
            cfg = {**cfg, **cfg["transformer_layer_config"]}
        eagle = cfg.get("eagle_config") or {}
        if int(cfg.get("num_hidden_layers", 1)) != 1:
            raise FormatError(
                f"{where}: an EAGLE-3 head has one decoder layer, this config has {cfg['num_hidden_layers']}",
                hint="is this a full model? pass it with --draft-model instead",
            )
        try:
            hidden = int(cfg["hidden_size"])
            heads = int(cfg["num_attention_heads"])
            vocab = int(cfg["vocab_size"])
            ff = int(cfg["intermediate_size"])
        except KeyError as exc:
            raise FormatError(f"{where}: missing {exc.args[0]}", hint="the head's config.json is incomplete") from exc
        rope = cfg.get("rope_parameters") or {}
        aux = cfg.get("eagle_aux_hidden_state_layer_ids") or eagle.get("eagle_aux_hidden_state_layer_ids")
        return cls(
            hidden_size=hidden,
            num_attention_heads=heads,
            num_key_value_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=int(cfg.get("head_dim") or hidden // heads),
            intermediate_size=ff,
            vocab_size=vocab,
            draft_vocab_size=int(cfg.get("draft_vocab_size") or vocab),
            target_hidden_size=int(cfg.get("target_hidden_size") or hidden),
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            rope_theta=float(cfg.get("rope_theta") or rope.get("rope_theta") or 10000.0),
            rope_scaling=_rope_scaling(cfg.get("rope_scaling") or rope, where),
            max_position_embeddings=int(cfg.get("max_position_embeddings", 8192)),
            aux_layer_ids=tuple(int(i) for i in aux) if aux else None,
            fc_norm=bool(cfg.get("fc_norm", eagle.get("fc_norm", False))),
            norm_output=bool(cfg.get("norm_output", eagle.get("norm_output", False))),
            norm_before_residual=bool(cfg.get("norm_before_residual", False)),
            norm_before_fc=bool(cfg.get("norm_before_fc", False)),
            draft_window=_draft_window(cfg.get("draft_window"), where),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "architectures": ["LlamaForCausalLMEagle3"],
            "model_type": "llama",
            "num_hidden_layers": 1,
            "hidden_act": "silu",
            "tie_word_embeddings": False,
        }
        for key, value in asdict(self).items():
            if key in ("aux_layer_ids", "rope_scaling") or (key == "draft_window" and value is None) \
                    or (key == "norm_before_fc" and not value):
                continue
            out[key] = value
        if self.rope_scaling is not None:
            out["rope_scaling"] = {"rope_type": "llama3", **asdict(self.rope_scaling)}
        if self.aux_layer_ids is not None:
            out["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": list(self.aux_layer_ids)}
        return out

    def feature_layers(self, target_n_layer: int) -> tuple[int, ...]:
        """Target layers whose *inputs* the head consumes (HF `hidden_states[i]`, embedding = 0)."""
        if self.aux_layer_ids is not None:
            return self.aux_layer_ids
        n = target_n_layer
        return (2, n // 2, n - 3)


def _draft_window(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise FormatError(f"{where}: draft_window must be a positive integer, not {value!r}",
                          hint="remove the key (full attention) or set the head's training length")
    return value


def _rope_scaling(rs: Mapping[str, Any] | None, where: str) -> RopeScaling | None:
    kind = (rs or {}).get("rope_type") or (rs or {}).get("type")
    if kind in (None, "default"):
        return None
    if kind != "llama3":
        raise FormatError(f"{where}: rope scaling {kind!r} is not supported for EAGLE-3 heads", hint="supported: llama3, none")
    return RopeScaling(
        factor=float(rs["factor"]),
        low_freq_factor=float(rs.get("low_freq_factor", 1.0)),
        high_freq_factor=float(rs.get("high_freq_factor", 4.0)),
        original_max_position_embeddings=int(rs.get("original_max_position_embeddings", 8192)),
    )
