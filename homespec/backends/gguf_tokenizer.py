"""A GGUF's tokenizer built with the `tokenizers` library from the file's own tokenizer.* data: token
ids equal to llama.cpp's without llama-cpp-python (the torch backend, the GPU kernels' benches, a
machine without the llama.cpp build, a process where a CUDA llama.cpp and torch must not meet).

What llama.cpp does for a byte-level BPE vocabulary (`tokenizer.ggml.model` "gpt2"; src/llama-vocab.cpp in
the pinned llama.cpp), and so what this builds:

* pre-tokenisation: the regexes of the file's `tokenizer.ggml.pre` type, applied one after another, each
  splitting every piece the previous one left (unicode_regex_split), matches and gaps both kept: a
  `Split(regex, "isolated")` per regex, then GPT-2's byte-to-unicode mapping (`ByteLevel`, no regex);
* the BPE merges in the file's order, with `ignore_merges` for the types that look a whole piece up
  before merging (llama3 and its kin);
* control tokens (token type 3) match only when special tokens are parsed; user-defined ones (4) always;
* detokenisation: byte-level back to bytes token by token, control tokens dropped unless asked for,
  as llama-cpp-python's detokenize (which homespec's llama.cpp tokenizer calls) joins llama_token_to_piece;
  llama.cpp's `clean_spaces` passes (llama_detokenize) are not applied there, so not here either.

Types whose regexes are copied here: default, gpt2 and its kin, smollm / starcoder / refact, llama3,
qwen2, gpt-4o / llama4. Others (and SentencePiece vocabularies, `tokenizer.ggml.model` "llama") raise
UnsupportedTokenizer: homespec.backends.tokenizer then uses llama.cpp's own.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from homespec.atomic import write_text
from homespec.backends.template import ChatTemplate, Templated
from homespec.errors import FormatError
from homespec.formats.gguf import read_gguf_header

_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
           r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_CONTRACTION = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?"
_GPT4O = (r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+" + _CONTRACTION + "|"
          r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*" + _CONTRACTION + "|"
          r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_DEFAULT = (r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", r"[0-9][0-9][0-9]")




@dataclass(frozen=True, slots=True)
class PreType:
    regexes: tuple[str, ...]
    ignore_merges: bool = False


_TYPES: dict[str, PreType] = {}
for _names, _type in (
    (("default",), PreType(_DEFAULT)),
    (("gpt-2", "gpt2", "phi-2", "mpt", "olmo", "jais", "jina-es", "jina-de", "roberta-bpe"), PreType((_GPT2,))),
    (("smollm", "starcoder", "refact", "codeshell", "exaone", "minerva", "command-r"), PreType((r"\p{N}", _GPT2))),
    (("llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral"), PreType((_LLAMA3,), ignore_merges=True)),
    (("qwen2", "deepseek-r1-qwen"), PreType((_QWEN2,))),
    (("gpt-4o", "llama4"), PreType((_GPT4O,))),
):
    for _name in _names:
        _TYPES[_name] = _type

CONTROL, USER_DEFINED = 3, 4  # llama_token_type
_KEYS = ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges")
# end-of-generation tokens llama.cpp finds by name (llama-vocab.cpp, load): its EOG names, and the FIM
# repo / file-separator tokens, which it also ends generation on
_EOG_NAMES = frozenset((
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
    "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
    "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>", "<｜end▁of▁sentence｜>", "[e~[",
    "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", "<|file_sep|>",
))


class UnsupportedTokenizer(FormatError):
    """The GGUF's vocabulary is of a kind this builder does not reproduce (llama.cpp's own is used)."""


@functools.cache
def _byte_decoder() -> dict[str, int]:
    """GPT-2's bytes_to_unicode, inverted: the character a byte-level BPE token spells each byte with."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def _pre_type(md: dict, path: str) -> PreType:
    model = md.get("tokenizer.ggml.model")
    if model != "gpt2":
        raise UnsupportedTokenizer(f"{path}: a {model!r} vocabulary is not rebuilt with `tokenizers`",
                                   hint="llama.cpp's own tokenizer reads it (install llama-cpp-python)")
    pre = str(md.get("tokenizer.ggml.pre") or "default")
    if pre not in _TYPES:
        raise UnsupportedTokenizer(f"{path}: pre-tokenizer {pre!r} is not one homespec rebuilds",
                                   hint="llama.cpp's own tokenizer reads it (install llama-cpp-python)")
    return _TYPES[pre]


def build(md: dict, path: str = "GGUF") -> tuple[Any, PreType]:
    """A `tokenizers.Tokenizer` equal to llama.cpp's for the header metadata `md` (arrays kept)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    kind = _pre_type(md, path)
    tokens, types, merges = (md.get(k) for k in _KEYS)
    if not isinstance(tokens, list) or not isinstance(merges, list):
        raise FormatError(f"{path}: no tokenizer.ggml.tokens / merges in the header", hint="the file is damaged")
    types = types if isinstance(types, list) else [1] * len(tokens)
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    bpe = models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=pairs, fuse_unk=False,
                     ignore_merges=kind.ignore_merges)
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in kind.regexes]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    types = token_types(tokens, types)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, ty in zip(tokens, types) if ty == CONTROL])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t, ty in zip(tokens, types) if ty == USER_DEFINED])
    return tok, kind


# llama.cpp always renders these gpt-oss (harmony) tokens: it makes them user-defined (llama-vocab.cpp)
_HARMONY_USER = frozenset(("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"))


def token_types(tokens: list[str], types: list[int]) -> list[int]:
    """The file's token types as llama.cpp uses them: EOG names it finds are control tokens, and
    harmony's channel markers user-defined."""
    out = list(types)
    for i, t in enumerate(tokens):
        if t in _HARMONY_USER:
            out[i] = USER_DEFINED
        elif t in _EOG_NAMES and out[i] != CONTROL:
            out[i] = CONTROL
    return out


class GGUFTokenizer(Templated):
    """The tokenizer of a GGUF file, from its own tokenizer data (see the module); the Tokenizer
    protocol of homespec.contracts.backend, as homespec.backends.llamacpp.tokenizer has it."""

    def __init__(self, model_path: str | os.PathLike):
        path = os.fspath(model_path)
        md = read_gguf_header(path, keep_arrays=_KEYS).metadata
        self._tok, self._kind = build(md, path)
        tokens: list[str] = md["tokenizer.ggml.tokens"]
        types = token_types(tokens, md.get("tokenizer.ggml.token_type") or [1] * len(tokens))
        self._special = {i for i, ty in enumerate(types) if ty == CONTROL}
        self._pieces = tokens
        self.model_path = path
        self.n_vocab = len(tokens)
        bos, eos = md.get("tokenizer.ggml.bos_token_id"), md.get("tokenizer.ggml.eos_token_id")
        self.bos_id: int | None = int(bos) if isinstance(bos, int) else None
        self._add_bos = bool(md.get("tokenizer.ggml.add_bos_token", False)) and self.bos_id is not None
        eog = {int(md[k]) for k in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                                    "tokenizer.ggml.eom_token_id") if isinstance(md.get(k), int)}
        eog |= {i for i, t in enumerate(tokens) if t in _EOG_NAMES}
        self.eos_ids = frozenset(i for i in eog if 0 <= i < len(tokens))
        piece = (lambda i: tokens[i] if i is not None and 0 <= i < len(tokens) else "")
        self._template = ChatTemplate(md.get("tokenizer.chat_template"), piece(self.bos_id),
                                      piece(int(eos) if isinstance(eos, int) else None), path)

    def encode(self, text: str, add_bos: bool = True, special: bool = False) -> list[int]:
        self._tok.encode_special_tokens = not special  # control tokens as plain text, as parse_special=False
        ids = self._tok.encode(text, add_special_tokens=False).ids
        return [self.bos_id, *ids] if add_bos and self._add_bos else ids

    def decode(self, ids: Sequence[int], special: bool = False) -> str:
        """As homespec's llama.cpp tokenizer detokenizes (token by token, llama-cpp-python's
        detokenize): control tokens spelled out only when `special`, a space after a leading BOS dropped."""
        keep = [i for i in ids if special or i not in self._special]
        raw = b"".join(self.token_bytes(i) for i in keep)
        if ids and ids[0] == self.bos_id and raw[:1] == b" ":
            raw = raw[1:]
        return raw.decode("utf-8", errors="replace")

    def token_bytes(self, token: int) -> bytes:
        """The token's bytes (a byte-level token may hold part of a UTF-8 character)."""
        piece = self._pieces[token]
        table = _byte_decoder()
        if token in self._special or any(c not in table for c in piece):
            return piece.encode("utf-8")
        return bytes(table[c] for c in piece)

    @property
    def tokenizer_json(self) -> str:
        """The rebuilt tokenizer as a tokenizer.json (what llguidance reads a vocabulary from for
        constrained decoding), written once per vocabulary under the user's cache."""
        import hashlib

        text = self._tok.to_str()
        root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        path = os.path.join(root, "homespec", "tokenizers", hashlib.sha256(text.encode()).hexdigest()[:24] + ".json")
        if not os.path.isfile(path):
            write_text(Path(path), text)
        return path

    def close(self) -> None:
        pass


__all__ = ["GGUFTokenizer", "UnsupportedTokenizer", "build", "token_types"]
