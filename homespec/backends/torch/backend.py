"""homespec's own PyTorch backend: the reference implementation of the Backend protocol.

It hands out numpy, as every backend does (homespec.contracts.backend): logits and features
leave the device as float32 host arrays at this boundary.

Runs a Llama-family model (homespec.nets.llama) from a GGUF file (dequantised) or a Hugging
Face directory, with a static KV cache and tree attention, so a whole draft tree is verified in
one pass. See homespec.contracts.backend for the conventions (root not yet in cache, commit/rollback).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import torch

from homespec.backends.tokenizer import load_tokenizer
from homespec.contracts.backend import Forward, MemoryReport, Tokenizer, check_rollback, nothing_verified
from homespec.contracts.tree import check_path, check_tree, depth_list, is_chain
from homespec.errors import HomespecError
from homespec.heap import keep_freed_memory
from homespec.kernels import tree_mask
from homespec.nets.llama import LlamaModel
from homespec.nets.load import load_model

if TYPE_CHECKING:
    from homespec.backends.settings import TorchSettings

# Tree size the compute estimate is sized for (EAGLE-2's default dynamic tree has 60 nodes).
_ESTIMATE_TOKENS = 64


class TorchBackend:
    name = "torch"
    supports_tree = True

    def __init__(self, model: LlamaModel, model_path: str):
        self.model = model
        self.model_path = model_path
        self.device = str(model.device)
        self.n_vocab = model.cfg.n_vocab
        self.max_context = model.max_context
        self.feature_layers: tuple[int, ...] = ()
        self._tokenizer: Tokenizer | None = None
        self._last_verify = 0  # nodes written by the last verify (0 = nothing to commit)
        self._last_parents: list[int] = []
        self.settings: TorchSettings | None = None  # what a plan started it with (from_settings)

    @classmethod
    def load(
        cls,
        model_path: str,
        *,
        device: str | None = None,
        dtype: str | torch.dtype | None = None,
        max_context: int | None = None,
    ) -> "TorchBackend":
        keep_freed_memory()  # each step's temporaries reuse heap memory instead of fresh pages
        return cls(load_model(str(model_path), device=device, dtype=dtype, max_context=max_context), str(model_path))

    @classmethod
    def from_settings(cls, model_path: str, s: "TorchSettings") -> "TorchBackend":
        """Load with the settings a plan decided (homespec.backends.settings.torch_settings)."""
        backend = cls.load(model_path, device=s.device, dtype=s.dtype, max_context=s.max_context)
        backend.settings = s
        return backend

    # --- properties ----------------------------------------------------------------------

    @property
    def tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:  # loaded on first use: numeric work needs no tokenizer

            # the rebuilt tokenizer for a GGUF: no llama.cpp in a torch process (docs/backends.md)
            self._tokenizer = load_tokenizer(self.model_path, prefer="tokenizers")
        return self._tokenizer

    @property
    def n_past(self) -> int:
        return self.model.n_past

    @property
    def n_layer(self) -> int:
        return self.model.cfg.n_layer

    @property
    def hidden_size(self) -> int:
        return self.model.cfg.n_embd

    def set_feature_layers(self, layers: Sequence[int]) -> None:
        layers = tuple(int(i) for i in layers)
        bad = [i for i in layers if not 0 <= i <= self.n_layer]
        if bad:
            raise HomespecError(
                f"feature layers {bad} are outside 0..{self.n_layer} for this {self.n_layer}-layer model",
                hint="the draft head was trained for a different target model",
            )
        self.feature_layers = layers

    # --- forward passes ------------------------------------------------------------------

    def prefill(self, tokens: Sequence[int]) -> Forward:
        if len(tokens) == 0:
            raise HomespecError("prefill needs at least one token", hint="the prompt is empty")
        ids = torch.as_tensor(list(tokens), dtype=torch.long)  # [T]
        out = self.model.forward(ids, capture=self.feature_layers, logits_rows=slice(-1, None))
        self.model.commit(len(tokens))
        self._last_verify = 0
        return _forward(out.logits, out.features)  # logits [1, V], features [T, k*H]

    def verify(self, tokens: Sequence[int], parents: Sequence[int]) -> Forward:
        parents = check_tree(tokens, parents)
        start = self.model.n_past
        pos = torch.as_tensor([start + d for d in depth_list(parents)], dtype=torch.long)  # [T]
        ids = torch.as_tensor([int(t) for t in tokens], dtype=torch.long)  # [T]
        # [T, T] ancestor-or-self mask, built on the model's device (one launch on a GPU); a chain is causal
        mask = None if is_chain(parents) else tree_mask(torch.as_tensor(parents, device=self.model.device), 0)
        out = self.model.forward(ids, pos, mask, capture=self.feature_layers)
        self._last_verify = len(tokens)
        self._last_parents = parents
        return _forward(out.logits, out.features)  # logits [T, V]

    def commit(self, path: Sequence[int]) -> None:
        if not self._last_verify:
            raise nothing_verified()
        self.model.commit_path(check_path(path, self._last_parents))
        self._last_verify = 0

    def rollback(self, n: int) -> None:
        self.model.rollback(check_rollback(n, self.model.n_past))
        self._last_verify = 0

    def reset(self) -> None:
        self.model.reset()
        self._last_verify = 0

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """Token embeddings [..., H] on the model's device (a torch head beside it shares them)."""
        return self.model.embed[tokens.to(self.model.device)]  # [..., H]

    # --- memory ----------------------------------------------------------------------------

    def memory_report(self) -> MemoryReport:
        m = self.model
        cfg = m.cfg
        elt = m.embed.element_size()
        t, ctx = _ESTIMATE_TOKENS, m.max_context
        # Transients of one forward over t tokens at full context (bytes); the score matrix and
        # the float32 logits dominate, as in llama.cpp without flash attention.
        detail = {
            "logits": t * cfg.n_vocab * 4,
            "attn_scores": cfg.n_head * t * ctx * 4,
            "attn_mask": t * ctx,
            "ffn": 3 * t * cfg.n_ff * elt,
            "activations": 8 * t * cfg.n_embd * elt,
        }
        compute = sum(detail.values())
        if m.device.type == "cuda":
            detail["cuda_peak_allocated"] = int(torch.cuda.max_memory_allocated(m.device))
        detail["kv_per_token"] = 2 * cfg.n_layer * cfg.n_head_kv * cfg.head_dim * elt
        return MemoryReport(
            weights_bytes=m.weight_bytes(),
            kv_bytes=m.kv_bytes(),
            compute_bytes=compute,
            device=self.device,
            detail=detail,
        )

    def close(self) -> None:
        if self._tokenizer is not None and hasattr(self._tokenizer, "close"):
            self._tokenizer.close()
        self._tokenizer = None
        self.model = None  # type: ignore[assignment]  # frees weights and cache


def _forward(logits: torch.Tensor, features: torch.Tensor | None) -> Forward:
    """What crosses the Backend seam: float32 numpy on the host (homespec.contracts.backend)."""
    return Forward(logits=logits.float().cpu().numpy(),
                   features=None if features is None else features.float().cpu().numpy())


def use_threads(threads: int | None) -> None:
    """torch's intra-op threads for this process (--threads; None or 0: torch's own choice)."""
    if threads:
        torch.set_num_threads(threads)
