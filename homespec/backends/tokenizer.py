"""Tokenizers for target models, behind the `Tokenizer` protocol of homespec.contracts.backend.

* GGUF files: llama.cpp's own tokenizer (llama_cpp with vocab_only=True), so token ids match what
  llama.cpp computes bit for bit; chat template and end-of-generation ids from the file's metadata.
* Hugging Face directories: `tokenizers` with tokenizer.json, chat template from tokenizer_config.json
  (or chat_template.jinja).

Chat templates are Jinja run in a sandbox, with the variables Hugging Face templates expect
(messages, add_generation_prompt, bos_token, eos_token, raise_exception, strftime_now; tools and
a request's template arguments such as enable_thinking when given) and transformers' `tojson`
(plain JSON, not Jinja's HTML-escaped one).
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any, Sequence

from homespec.errors import FormatError, HomespecError


def _template_env() -> Any:
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise HomespecError(f"chat template: {message}", hint="check the roles and order of the messages")

    def strftime_now(fmt: str) -> str:
        return datetime.datetime.now().strftime(fmt)

    # trim_blocks/lstrip_blocks: how transformers renders templates, which the authors wrote for
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.filters["tojson"] = _tojson
    return env


def _tojson(value: Any, indent: int | None = None, separators: Any = None, sort_keys: bool = False,
            ensure_ascii: bool = False) -> str:
    """transformers' tojson: the JSON a template's author saw (Jinja's escapes <, > and & for HTML)."""
    return json.dumps(value, indent=indent, separators=separators, sort_keys=sort_keys, ensure_ascii=ensure_ascii)


class ChatTemplate:
    def __init__(self, source: str | None, bos_token: str, eos_token: str, origin: str):
        self.source = source
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.origin = origin
        self._compiled = None

    def render(self, messages: Sequence[dict[str, Any]], add_generation_prompt: bool, **extra: Any) -> str:
        """The prompt; `extra`: more variables (tools, enable_thinking, reasoning_effort, ...)."""
        if not self.source:
            raise HomespecError(
                f"{self.origin} has no chat template",
                hint="use `homespec generate` with a plain prompt, or a model with a chat template",
            )
        if self._compiled is None:
            from jinja2 import TemplateError

            try:
                self._compiled = _template_env().from_string(self.source)
            except TemplateError as exc:
                raise FormatError(f"{self.origin}: chat template does not parse ({exc})", hint="the template is broken") from exc
        return self._compiled.render(
            **extra,
            messages=list(messages),
            add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token,
            eos_token=self.eos_token,
        )

    def replaced(self, source: str, origin: str) -> "ChatTemplate":
        """Another template with this one's BOS and EOS (`serve --chat-template-file`)."""
        return ChatTemplate(source, self.bos_token, self.eos_token, origin)


class LlamaCppTokenizer:
    """llama.cpp's tokenizer for a GGUF file (only the vocabulary is loaded, no weights)."""

    def __init__(self, model_path: str):
        from homespec.backends.llamacpp.lib import LogCollector, capture_log, import_llama_cpp

        llama_cpp = import_llama_cpp()  # (its log lines go to homespec's router, not the terminal)
        try:
            # a small n_ctx: llama-cpp-python still creates a (weightless) context for a vocab-only
            # model, and llama.cpp warns that it exceeds the (absent) training context
            with capture_log(LogCollector()):
                self._llama = llama_cpp.Llama(model_path, vocab_only=True, n_ctx=32, n_batch=32, verbose=False)
        except ValueError as exc:
            raise FormatError(f"{model_path}: llama.cpp cannot read the vocabulary ({exc})", hint="is it a complete GGUF file?") from exc
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
        return self._llama.detokenize([token], special=True).decode("utf-8", errors="replace")

    def encode(self, text: str, add_bos: bool = True, special: bool = False) -> list[int]:
        # add_bos follows llama.cpp: BOS is prepended only when the vocabulary asks for it
        return self._llama.tokenize(text.encode("utf-8"), add_bos=add_bos, special=special)

    def decode(self, ids: Sequence[int], special: bool = False) -> str:
        """`special`: control tokens spelled out (a tool-call marker), else left out as llama.cpp does."""
        return self._llama.detokenize(list(ids), special=special).decode("utf-8", errors="replace")

    def token_bytes(self, token: int) -> bytes:
        return self._llama.detokenize([token], special=True)

    @property
    def chat_template(self) -> ChatTemplate:
        return self._template

    @chat_template.setter
    def chat_template(self, template: ChatTemplate) -> None:
        self._template = template

    def chat_prompt(self, messages: Sequence[dict[str, Any]], add_generation_prompt: bool = True, **extra: Any) -> str:
        return self._template.render(messages, add_generation_prompt, **extra)

    def close(self) -> None:
        self._llama.close()


class HFTokenizer:
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

    @property
    def chat_template(self) -> ChatTemplate:
        return self._template

    @chat_template.setter
    def chat_template(self, template: ChatTemplate) -> None:
        self._template = template

    def chat_prompt(self, messages: Sequence[dict[str, Any]], add_generation_prompt: bool = True, **extra: Any) -> str:
        return self._template.render(messages, add_generation_prompt, **extra)

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


def load_tokenizer(model_path: str) -> LlamaCppTokenizer | HFTokenizer:
    """The tokenizer of a GGUF file or a Hugging Face model directory."""
    p = Path(model_path)
    if p.is_dir():
        return HFTokenizer(str(p))
    if p.is_file():
        with open(p, "rb") as fh:
            magic = fh.read(4)
        if magic == b"GGUF":
            return LlamaCppTokenizer(str(p))
        raise FormatError(f"{model_path}: not a GGUF file (magic {magic!r})", hint="pass a .gguf file or a model directory")
    raise HomespecError(f"{model_path}: no such file or directory", hint="check the path")
