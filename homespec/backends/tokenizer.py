"""Tokenizers for target models, behind the `Tokenizer` protocol of homespec.contracts.backend.

* GGUF files: llama.cpp's own tokenizer (homespec.backends.llamacpp.tokenizer), so token ids match
  what llama.cpp computes bit for bit; or the same tokenizer rebuilt with `tokenizers` from the file's
  own tokenizer data (homespec.backends.gguf_tokenizer), tested equal to llama.cpp's: what the torch
  backend asks for (`prefer="tokenizers"`), and what any caller gets where llama-cpp-python is not
  installed. A vocabulary the rebuild does not cover falls back to llama.cpp's.
* Hugging Face directories: `tokenizers` with tokenizer.json, chat template from tokenizer_config.json
  (or chat_template.jinja).

Chat templates: homespec.backends.template.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from typing import TYPE_CHECKING

from homespec.backends.gguf_tokenizer import GGUFTokenizer, UnsupportedTokenizer
from homespec.backends.template import ChatTemplate, Templated
from homespec.errors import FormatError, HomespecError

if TYPE_CHECKING:
    from homespec.backends.llamacpp.tokenizer import LlamaCppTokenizer


class HFTokenizer(Templated):
    """A Hugging Face `tokenizers` tokenizer.json with tokenizer_config.json's chat template."""

    def __init__(self, directory: str):
        from tokenizers import Tokenizer

        root = Path(directory)
        tj = root / "tokenizer.json"
        if not tj.is_file():
            raise FormatError(f"{directory}: no tokenizer.json", hint="download the model's tokenizer files too")
        self._tok = Tokenizer.from_file(str(tj))
        self.tokenizer_json = tj
        self.model_path = directory
        cfg = _read_json(root / "tokenizer_config.json")
        model_cfg = _read_json(root / "config.json")
        gen_cfg = _read_json(root / "generation_config.json")
        self.n_vocab = self._tok.get_vocab_size(with_added_tokens=True)
        bos_tok = _token_text(cfg.get("bos_token"))
        eos_tok = _token_text(cfg.get("eos_token"))
        self.bos_id = self._tok.token_to_id(bos_tok) if bos_tok else model_cfg.get("bos_token_id")
        # add_bos_token: Llama-2-style tokenizer configs ask for BOS; byte-level BPE ones
        # usually put it in tokenizer.json's post-processor instead, which encode() honours.
        self._add_bos = bool(cfg.get("add_bos_token", False)) and self.bos_id is not None
        eos: set[int] = set()
        if eos_tok and self._tok.token_to_id(eos_tok) is not None:
            eos.add(self._tok.token_to_id(eos_tok))
        for src in (model_cfg.get("eos_token_id"), gen_cfg.get("eos_token_id")):
            if isinstance(src, int):
                eos.add(src)
            elif isinstance(src, list):
                eos.update(int(x) for x in src)
        self.eos_ids = frozenset(eos)
        template = cfg.get("chat_template")
        jinja = root / "chat_template.jinja"
        if template is None and jinja.is_file():
            template = jinja.read_text()
        if isinstance(template, list):  # several named templates: use "default"
            template = next((t["template"] for t in template if t.get("name") == "default"), None)
        self._template = ChatTemplate(template, bos_tok or "", eos_tok or "", directory)

    def encode(self, text: str, add_bos: bool = True, special: bool = False) -> list[int]:
        # special=False: text that spells a special token is tokenized as ordinary text, like
        # llama.cpp's parse_special=False
        self._tok.encode_special_tokens = not special
        ids = self._tok.encode(text, add_special_tokens=add_bos).ids
        if add_bos and self._add_bos and (not ids or ids[0] != self.bos_id):
            ids = [self.bos_id, *ids]
        return ids

    def decode(self, ids: Sequence[int], special: bool = True) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=False)

    def token_bytes(self, token: int) -> bytes:
        return self._tok.decode([token], skip_special_tokens=False).encode("utf-8")

    def close(self) -> None:
        pass


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise FormatError(f"{path}: invalid JSON ({exc})", hint="the file is damaged; download it again") from exc


def _token_text(tok: Any) -> str | None:
    if isinstance(tok, dict):  # {"content": "<s>", ...} in older configs
        return tok.get("content")
    return tok


def load_tokenizer(model_path: str, *, prefer: str = "llamacpp") -> "LlamaCppTokenizer | GGUFTokenizer | HFTokenizer":
    """The tokenizer of a GGUF file or a Hugging Face model directory. For a GGUF, `prefer`
    "llamacpp" (llama.cpp's, or the rebuilt one where llama-cpp-python is not installed) or
    "tokenizers" (the rebuilt one, or llama.cpp's for a vocabulary it does not cover)."""
    p = Path(model_path)
    if p.is_dir():
        return HFTokenizer(str(p))
    if p.is_file():
        with open(p, "rb") as fh:
            magic = fh.read(4)
        if magic == b"GGUF":
            return _gguf_tokenizer(str(p), prefer)
        raise FormatError(f"{model_path}: not a GGUF file (magic {magic!r})", hint="pass a .gguf file or a model directory")
    raise HomespecError(f"{model_path}: no such file or directory", hint="check the path")


def _gguf_tokenizer(path: str, prefer: str) -> "LlamaCppTokenizer | GGUFTokenizer":
    if prefer == "tokenizers" or not _llama_cpp_installed():
        try:
            return GGUFTokenizer(path)
        except UnsupportedTokenizer:
            if not _llama_cpp_installed():
                raise
    # numpy: only when llama.cpp reads the GGUF's tokenizer
    from homespec.backends.llamacpp.tokenizer import LlamaCppTokenizer

    return LlamaCppTokenizer(path)


def _llama_cpp_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("llama_cpp") is not None
