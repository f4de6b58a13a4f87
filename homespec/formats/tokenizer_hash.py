"""A tokenizer's identity: one SHA-256 over its vocabulary, the same whether it is read from a GGUF
header or from a Hugging Face tokenizer.json, computed without loading any weights.

What is hashed (docs/catalogue.md, "Tokenizer hash"): every token id with its text, in id order,
one `"{id}\\t{text}\\n"` line each, where

* ids whose token is llama.cpp's padding placeholder `[PAD{id}]` are left out: convert_hf_to_gguf.py
  writes one for every id below the model's vocab_size that the tokenizer does not define (Qwen3's
  151,936-row embedding over 151,669 tokens), and a tokenizer.json simply has no such id;
* U+2581 (SentencePiece's space mark) is read as a space: the converter pre-normalises the spaces of
  user-defined added tokens that way, and nothing else in a vocabulary distinguishes the two.

Merges are not hashed: a SentencePiece GGUF carries none where its tokenizer.json does, and no two
published tokenizers share every token while differing in merges. Two files hash equal exactly when
they name the same tokens at the same ids: what a head trained on one target's token ids needs.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Iterable

from homespec.errors import FormatError
from homespec.formats.gguf import read_gguf_header

TOKENS_KEY = "tokenizer.ggml.tokens"
_PAD = re.compile(r"^\[PAD(\d+)\]$")


def tokens_digest(tokens: Iterable[tuple[int, str]]) -> str:
    """The hash of (id, text) pairs (any order; ids are sorted)."""
    h = hashlib.sha256()
    for i, text in sorted(tokens):
        pad = _PAD.match(text)
        if pad is not None and int(pad.group(1)) == i:
            continue
        h.update(f"{i}\t{text.replace(chr(0x2581), ' ')}\n".encode("utf-8", errors="surrogatepass"))
    return h.hexdigest()


def gguf_tokens_digest(tokens: list[str]) -> str:
    """The hash of a GGUF's tokenizer.ggml.tokens (the id is the position)."""
    return tokens_digest(enumerate(tokens))


def gguf_tokenizer_digest(path: str | os.PathLike) -> str | None:
    """The hash of a GGUF's vocabulary, read from its header alone; None when it carries no tokens."""
    tokens = read_gguf_header(path, keep_arrays=(TOKENS_KEY,)).metadata.get(TOKENS_KEY)
    return gguf_tokens_digest(tokens) if isinstance(tokens, list) and tokens else None


def json_tokens(path: str | os.PathLike) -> dict[int, str]:
    """id -> text of a tokenizer.json: the model's vocabulary (BPE / WordPiece / WordLevel map a token
    to its id; Unigram lists [token, score] in id order) with the added tokens over it."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise FormatError(f"{p}: not a readable tokenizer.json ({exc})", hint="download the tokenizer again") from None
    vocab = (data.get("model") or {}).get("vocab")
    out: dict[int, str] = {}
    if isinstance(vocab, dict):
        out = {int(i): str(t) for t, i in vocab.items()}
    elif isinstance(vocab, list):
        out = {i: str(entry[0]) for i, entry in enumerate(vocab) if isinstance(entry, list) and entry}
    for added in data.get("added_tokens") or []:
        if isinstance(added, dict) and isinstance(added.get("id"), int):
            out[added["id"]] = str(added.get("content", ""))
    if not out:
        raise FormatError(f"{p}: no vocabulary in tokenizer.json", hint="download the tokenizer again")
    return out


def json_tokenizer_digest(path: str | os.PathLike) -> str:
    """The hash of a tokenizer.json's vocabulary (equal to the GGUF converted from it)."""
    return tokens_digest(json_tokens(path).items())


def directory_tokenizer_digest(folder: str | os.PathLike) -> str | None:
    """The hash of a model directory's tokenizer.json, None when it has none."""
    tj = Path(folder) / "tokenizer.json"
    return json_tokenizer_digest(tj) if tj.is_file() else None


__all__ = ["TOKENS_KEY", "directory_tokenizer_digest", "gguf_tokenizer_digest", "gguf_tokens_digest",
           "json_tokenizer_digest", "json_tokens", "tokens_digest"]
