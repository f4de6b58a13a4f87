"""EXL2 backend: a target model in exllamav2 (CUDA only), with one-pass tree verification,
features captured in the same pass, cache commit/rollback and a measured memory report.

See homespec.contracts.backend for the conventions and homespec.backends.exl2.tree for how
exllamav2 is driven (masks, positions, feature modules). exllamav2 is imported when a model is
loaded, never at module import, so `from homespec.backends.exl2.backend import Exl2Backend` is cheap.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from homespec.backends.exl2.load import import_exllamav2
from homespec.backends.settings import Exl2Settings, exl2_settings
from homespec.contracts.backend import Forward, MemoryReport, Tokenizer, check_rollback, nothing_verified
from homespec.backends.exl2.tree import (RopePatch, additive_mask, causal_parents, commit_plan,
                                         feature_module_indices)
from homespec.backends.tokenizer import load_tokenizer
from homespec.contracts.tree import check_path, check_tree, depth_list, is_chain
from homespec.errors import HomespecError
from homespec.kernels import compact_kv, tree_mask


class Exl2Backend:
    name = "exl2"
    supports_tree = True

    def __init__(self, settings: Exl2Settings, ex: Any, model: Any, cache: Any, loaded_bytes: int):
        self.settings = settings
        self.model_path = settings.model_dir
        self.max_context = settings.max_seq_len
        self._ex, self.model, self.cache = ex, model, cache
        # the embedding table may live in system RAM; the first attention module's GPU is "the" device
        first = next(m.device_idx for m in model.modules if _kind(m) == "attn")
        self.device = f"cuda:{first}"
        self.n_vocab = int(model.config.vocab_size)
        self.feature_layers: tuple[int, ...] = ()
        self._feature_modules: list[int] = []
        self._tokenizer: Tokenizer | None = None
        self._loaded_bytes = loaded_bytes
        self._last: tuple[int, list[int], list[int]] | None = None  # (n_past, parents, tokens) of the last verify
        self.recomputed_commits = 0  # commits a quantised cache could only do by re-evaluating
        self._rope: dict[int, tuple[Any, Any, Any, Any]] = {}  # device -> (sin, cos, sin copy, cos copy)

    @classmethod
    def load(cls, model_dir: str, *, max_context: int | None = None, kv_type: str | None = None,
             plan: Any = None) -> "Exl2Backend":
        """Load an EXL2 directory; settings come from `plan` where given (explicit values win)."""
        return cls.from_settings(exl2_settings(model_dir, plan, max_context=max_context, kv_type=kv_type))

    @classmethod
    def from_settings(cls, s: Exl2Settings) -> "Exl2Backend":
        ex = import_exllamav2()
        config = ex.ExLlamaV2Config(s.model_dir)
        config.max_seq_len = s.max_seq_len
        config.max_input_len = s.max_input_len
        config.max_attention_size = s.max_input_len ** 2
        model = ex.ExLlamaV2(config)
        cache_cls = {"fp16": ex.ExLlamaV2Cache, "q8": ex.ExLlamaV2Cache_Q8, "q6": ex.ExLlamaV2Cache_Q6,
                     "q4": ex.ExLlamaV2Cache_Q4}[s.cache_mode]
        before = _allocated()
        cache = cache_cls(model, max_seq_len=s.max_seq_len, lazy=True)
        # fills GPUs in turn, building the cache alongside, keeping free what the plan reserved
        model.load_autosplit(cache, reserve_vram=_reserve_vram(s), progress=False)
        return cls(s, ex, model, cache, _allocated() - before)

    # --- properties ----------------------------------------------------------------------

    @property
    def tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.model_path)
        return self._tokenizer

    @property
    def n_past(self) -> int:
        return int(self.cache.current_seq_len)

    @property
    def n_layer(self) -> int:
        return int(self.model.config.num_hidden_layers)

    @property
    def hidden_size(self) -> int:
        return int(self.model.config.hidden_size)

    def set_feature_layers(self, layers: Sequence[int]) -> None:
        kinds = [(_kind(m), getattr(m, "layer_idx", None)) for m in self.model.modules]
        kinds[self.model.head_layer_idx - 1] = ("norm", None)  # the final norm sits right before the head
        self._feature_modules = feature_module_indices(kinds, [int(i) for i in layers], self.n_layer)
        self.feature_layers = tuple(int(i) for i in layers)

    # --- forward passes ------------------------------------------------------------------

    def _run(self, ids: Sequence[int], parents: Sequence[int], *, last_only: bool = False) -> Forward:
        """One forward of `ids` after the cache, node i attending to the cache and its ancestors
        under `parents`; the cache's length is left at n_past + len(ids) (exllamav2 advances it)."""
        past, t = self.n_past, len(ids)
        if past + t > self.max_context:
            raise HomespecError(f"context full: {past + t} tokens would exceed the context of {self.max_context}",
                                hint="start a new conversation or load the model with a larger --ctx")
        dev = torch.device(self.device)
        par = torch.as_tensor(list(parents), dtype=torch.long, device=dev)  # [T]
        mask = additive_mask(tree_mask(par, past))  # [1, 1, T, past+T] fp16
        depth = depth_list(parents)
        chain = is_chain(parents)
        params = self._ex.attn.ExLlamaV2Attention.Params(1, t, past, mask, None,
                                                         alt_rope_embed=None if chain else self._tree_rope(past, depth))
        params.attn_mask = mask
        params.block_diag_mask = mask
        ids_t = torch.as_tensor([list(ids)], dtype=torch.long)  # [1, T]; exllamav2 embeds on its own device
        try:
            r = self.model.forward_chunk(ids_t, cache=self.cache, attn_params=params, last_id_only=last_only,
                                         extract_state_indices=self._feature_modules)
        finally:
            if not chain:
                self._untree_rope(past, t)
        logits = r["logits"][0].float()  # [T or 1, V]
        feats = None
        if self._feature_modules:
            # [T, k*H]: inputs of the chosen layers, in feature_layers order, on the first device
            feats = torch.cat([r["states"][i][0].to(dev) for i in self._feature_modules], dim=-1)
        # what crosses the Backend seam: float32 numpy on the host (homespec.contracts.backend)
        return Forward(logits=logits.cpu().numpy(), features=None if feats is None else feats.float().cpu().numpy())

    def prefill(self, tokens: Sequence[int]) -> Forward:
        if len(tokens) == 0:
            raise HomespecError("prefill needs at least one token", hint="the prompt is empty")
        step = self.settings.max_input_len
        feats, out = [], None
        for a in range(0, len(tokens), step):  # chunks of at most max_input_len (exllamav2's scratch size)
            chunk = list(tokens[a:a + step])
            out = self._run(chunk, causal_parents(len(chunk)), last_only=True)
            if out.features is not None:
                feats.append(out.features)
        self._last = None
        return Forward(logits=out.logits, features=np.concatenate(feats) if feats else None)

    def verify(self, tokens: Sequence[int], parents: Sequence[int]) -> Forward:
        parents = check_tree(tokens, parents)
        past = self.n_past
        out = self._run([int(t) for t in tokens], parents)
        self.cache.current_seq_len = past  # verified, not committed
        self._last = (past, parents, [int(t) for t in tokens])
        return out

    def commit(self, path: Sequence[int]) -> None:
        if self._last is None:
            raise nothing_verified()
        past, parents, tokens = self._last
        path = check_path(path, parents)
        how = commit_plan(path, int(getattr(self.cache, "q_block", 0) or 0))
        if how == "copy":
            self._copy_rows(past, path)
        elif how == "recompute":
            self.cache.current_seq_len = past
            self._run([tokens[j] for j in path], causal_parents(len(path)), last_only=True)
            self.recomputed_commits += 1
        self.cache.current_seq_len = past + len(path)
        self._last = None

    def _copy_rows(self, past: int, path: list[int]) -> None:
        nodes = torch.as_tensor(path, dtype=torch.long)
        c = self.cache
        # exllamav2 cache tensors are [batch=1, max_seq, Hkv, D'] per layer: viewed as
        # [1, 1, max_seq, Hkv*D'] they have compact_kv's [L, H, C, D] layout
        pairs = [(c.key_states, c.value_states)]
        if getattr(c, "has_scales", False):
            pairs.append((c.key_scales, c.value_scales))
        for ks, vs in pairs:
            for k, v in zip(ks, vs):
                k4 = k.view(1, 1, k.shape[1], -1)
                v4 = v.view(1, 1, v.shape[1], -1)
                # packed uint8 rows of a quantised cache: the torch reference moves bytes as they are
                floats = k.dtype in (torch.float16, torch.float32, torch.bfloat16)
                compact_kv(k4, v4, past, nodes.to(k.device), impl=None if floats else "torch")

    def rollback(self, n: int) -> None:
        n = check_rollback(n, self.n_past)
        self.cache.current_seq_len = self.n_past - n
        self._last = None

    def reset(self) -> None:
        self.cache.current_seq_len = 0
        self._last = None

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        emb = self.model.modules[0].embedding  # nn.Embedding, possibly in system RAM
        return emb(tokens.to(emb.weight.device)).to(self.device)  # [..., H]

    # --- tree positions --------------------------------------------------------------------

    def _tree_rope(self, past: int, depth: list[int]) -> dict[int, tuple[Any, Any]]:
        patch = RopePatch(past, tuple(past + d for d in depth))
        out = {}
        for dev in sorted({m.device_idx for m in self.model.modules if _kind(m) == "attn"}):
            if dev not in self._rope:
                ctx = self.model.get_device_context(dev)
                if len(ctx.sin) != 1:
                    raise HomespecError("tree verification on exllamav2 supports one RoPE table per model",
                                        hint="use a chain draft (--draft-topk 1) with this model")
                self._rope[dev] = (ctx.sin[0], ctx.cos[0], ctx.sin[0].clone(), ctx.cos[0].clone())
            sin, cos, sin_t, cos_t = self._rope[dev]
            patch.apply(sin_t, sin)
            patch.apply(cos_t, cos)
            out[dev] = (sin_t, cos_t)
        return out

    def _untree_rope(self, past: int, t: int) -> None:
        patch = RopePatch(past, tuple(range(past, past + t)))
        for sin, cos, sin_t, cos_t in self._rope.values():
            patch.restore(sin_t, sin)
            patch.restore(cos_t, cos)

    # --- memory ----------------------------------------------------------------------------

    def memory_report(self) -> MemoryReport:
        c = self.cache
        tensors = list(c.key_states) + list(c.value_states)
        if getattr(c, "has_scales", False):
            tensors += list(c.key_scales) + list(c.value_scales)
        for pair in getattr(c, "temp_tensors", {}).values():  # quantised caches' fp16 staging buffers
            tensors += list(pair)
        kv = sum(t.numel() * t.element_size() for t in tensors if t is not None)
        peak = sum(int(torch.cuda.max_memory_allocated(i)) for i in range(torch.cuda.device_count()))
        now = _allocated()
        detail = {"allocated_after_load": self._loaded_bytes, "allocated_now": now, "peak_allocated": peak,
                  "cache_tokens": self.max_context}
        return MemoryReport(
            weights_bytes=max(0, self._loaded_bytes - kv),  # load_autosplit allocates weights, scratch and cache
            kv_bytes=kv,
            compute_bytes=max(0, peak - now),
            device=self.device,
            detail=detail,
        )

    def close(self) -> None:
        if self.model is not None:
            self.model.unload()
        self.model = self.cache = None  # type: ignore[assignment]
        self._rope.clear()
        torch.cuda.empty_cache()


def _kind(module: Any) -> str:
    return "attn" if type(module).__name__.endswith("Attention") else type(module).__name__


def _reserve_vram(s: Exl2Settings) -> list[int] | None:
    """The plan's reserve per GPU when it planned for every visible GPU (load_autosplit indexes the
    list by device); otherwise exllamav2's defaults, which are the planner's figures too."""
    return list(s.reserve_vram) if s.reserve_vram and len(s.reserve_vram) == torch.cuda.device_count() else None


def _allocated() -> int:
    return sum(int(torch.cuda.memory_allocated(i)) for i in range(torch.cuda.device_count()))
