"""The model's vocabulary as llguidance reads it: every token's bytes, which ones are special, the
end-of-generation ids. Built once per tokenizer (about half a second for a 50k vocabulary).

A GGUF model's vocabulary comes from llama.cpp itself (llguidance.llamacpp reads each token's
piece and attributes through the same llama_vocab the engine tokenizes with); a Hugging Face
directory's from its tokenizer.json.
"""

from __future__ import annotations

import threading
import warnings
from typing import TYPE_CHECKING, Any

from homespec.errors import HomespecError

if TYPE_CHECKING:
    from homespec.contracts.backend import Tokenizer

_LOCK = threading.Lock()
_BUILT: dict[int, tuple[Any, Any]] = {}  # id(tokenizer) -> (tokenizer, LLTokenizer): the tokenizer kept alive


def vocabulary(tokenizer: "Tokenizer") -> Any:
    """llguidance's LLTokenizer for `tokenizer`, built on first use and kept."""
    with _LOCK:
        hit = _BUILT.get(id(tokenizer))
        if hit is not None and hit[0] is tokenizer:
            return hit[1]
        built = _build(tokenizer)
        _BUILT[id(tokenizer)] = (tokenizer, built)
        return built


def _build(tokenizer: "Tokenizer") -> Any:
    eos = sorted(tokenizer.eos_ids)
    llama_vocab = getattr(tokenizer, "llama_vocab", None)
    if llama_vocab is not None:
        from llguidance.llamacpp import lltokenizer_from_vocab

        with warnings.catch_warnings():  # it reads attributes through a name llama-cpp-python deprecates, per token
            warnings.simplefilter("ignore", DeprecationWarning)
            return lltokenizer_from_vocab(llama_vocab, n_vocab=getattr(tokenizer, "n_vocab", None),
                                          eos_token=eos or None)
    json_path = getattr(tokenizer, "tokenizer_json", None)
    if json_path is not None:
        from llguidance import LLTokenizer

        return LLTokenizer(str(json_path), n_vocab=getattr(tokenizer, "n_vocab", None), eos_token=eos or None)
    raise HomespecError("constrained decoding needs the model's vocabulary, which this tokenizer does not expose",
                        hint="serve a GGUF file or a Hugging Face directory with tokenizer.json")
