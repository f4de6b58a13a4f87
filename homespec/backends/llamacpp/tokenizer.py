"""llama.cpp's tokenizer for a GGUF file (llama_cpp with vocab_only=True), so token ids match
what llama.cpp computes bit for bit; chat template and end-of-generation ids from the file's
metadata. homespec.backends.tokenizer.load_tokenizer chooses it for GGUF files.
"""

from __future__ import annotations

import ctypes
from typing import Sequence

from homespec.backends.llamacpp.lib import LogCollector, capture_log, import_llama_cpp
from homespec.backends.template import ChatTemplate, Templated
from homespec.errors import FormatError


class LlamaCppTokenizer(Templated):
    """llama.cpp's tokenizer for a GGUF file (only the vocabulary is loaded, no weights)."""

    def __init__(self, model_path: str):
        llama_cpp = self._lib = import_llama_cpp()  # (its log lines go to homespec's router, not the terminal)
        try:
            # a small n_ctx: llama-cpp-python still creates a (weightless) context for a vocab-only
            # model, and llama.cpp warns that it exceeds the (absent) training context
            with capture_log(LogCollector()):
                self._llama = llama_cpp.Llama(model_path, vocab_only=True, n_ctx=32, n_batch=32, verbose=False)
        except ValueError as exc:
            raise FormatError(f"{model_path}: llama.cpp cannot read the vocabulary ({exc})", hint="is it a complete GGUF file?") from exc
        self._pieces: tuple[dict[int, bytes], dict[int, bytes]] = ({}, {})  # token -> piece (special off, on)
        meta: dict[str, str] = self._llama.metadata
        vocab = self._llama._model.vocab
        self.n_vocab = self._llama.n_vocab()
        self.model_path = model_path
        bos = self._llama.token_bos()
        self.bos_id: int | None = bos if bos >= 0 else None
        eos = {self._llama.token_eos()}
        for key in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"):
            if key in meta:
                eos.add(int(meta[key]))
        # llama.cpp's own end-of-generation set (adds e.g. <|im_end|> / <|eot_id|> found by name)
        eos.update(i for i in range(self.n_vocab) if llama_cpp.llama_vocab_is_eog(vocab, i))
        self.eos_ids = frozenset(i for i in eos if i >= 0)
        self._template = ChatTemplate(
            meta.get("tokenizer.chat_template"),
            self.piece(self.bos_id) if self.bos_id is not None else "",
            self.piece(self._llama.token_eos()),
            model_path,
        )

    @property
    def llama_vocab(self) -> object:
        """llama.cpp's llama_vocab pointer (what a constrained-decoding library reads the vocabulary from)."""
        return self._llama._model.vocab

    def piece(self, token: int) -> str:
        """The token's text with special tokens spelled out (e.g. "<|im_end|>")."""
        return self._bytes((token,), True).decode("utf-8", errors="replace")

    def encode(self, text: str, add_bos: bool = True, special: bool = False) -> list[int]:
        # add_bos follows llama.cpp: BOS is prepended only when the vocabulary asks for it
        return self._llama.tokenize(text.encode("utf-8"), add_bos=add_bos, special=special)

    def decode(self, ids: Sequence[int], special: bool = False) -> str:
        """`special`: control tokens spelled out (a tool-call marker), else left out as llama.cpp does."""
        out = self._bytes(ids, special)
        if ids and ids[0] == self.bos_id and out[:1] == b" ":  # as llama-cpp-python does
            out = out[1:]
        return out.decode("utf-8", errors="replace")

    def token_bytes(self, token: int) -> bytes:
        return self._bytes((token,), True)

    def _bytes(self, ids: Sequence[int], special: bool) -> bytes:
        """llama.cpp's pieces of `ids`, joined once. (llama-cpp-python's detokenize() appends bytes
        to bytes, time quadratic in the ids, and drops every piece longer than its 32-byte buffer:
        SmolLM2's run of 48 dashes, say.) A token's piece never changes: each is asked of llama.cpp
        once (a streamed answer decodes its newest tokens every step)."""
        cache = self._pieces[bool(special)]
        try:
            return b"".join([cache[t] for t in ids])
        except KeyError:
            for t in ids:
                if t not in cache:
                    cache[t] = self._piece_bytes(int(t), special)
            return b"".join([cache[t] for t in ids])

    def _piece_bytes(self, token: int, special: bool) -> bytes:
        """llama_token_to_piece of one token (no leading space stripped)."""
        llama_cpp, vocab = self._lib, self._llama._model.vocab
        size = 64
        for _ in range(2):
            buf = (ctypes.c_char * size)()
            n = llama_cpp.llama_token_to_piece(vocab, llama_cpp.llama_token(token), buf, size, 0, special)
            if n >= 0:
                return buf.raw[:n]
            size = -n  # longer than the buffer: -n bytes needed
        return b""

    def close(self) -> None:
        self._llama.close()
