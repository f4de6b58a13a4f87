"""Tokenizers: llama.cpp's for GGUF files, `tokenizers` for HF directories, chat templates."""

from __future__ import annotations

import ctypes
import json

import pytest

from homespec.backends.tokenizer import load_tokenizer
from homespec.contracts.backend import Tokenizer
from homespec.errors import FormatError, HomespecError
from tiny_models import write_hf_tokenizer

TEXTS = [
    "Hello world",
    " leading space",
    "numbers 1234567 and 3.14159",
    "ünïcödé — “quotes” 日本語 😀",
    "def f(x):\n\treturn x**2  # comment\n\n\n",
    "I'm sure we'll see; they've gone",
    "<|im_start|>user\nhi<|im_end|>",
    "   multiple   spaces\n\n  ",
    "CamelCaseWords and snake_case_words",
    "$100,000.00 (approx.)",
]


@pytest.fixture(scope="module")
def gguf_tok(smollm2_path):
    pytest.importorskip("llama_cpp")
    return load_tokenizer(str(smollm2_path))


@pytest.fixture(scope="module")
def hf_tok(tmp_path_factory, smollm2_path):
    d = tmp_path_factory.mktemp("tok")
    write_hf_tokenizer(d, smollm2_path)
    return load_tokenizer(str(d))


def test_gguf_tokenizer_smollm2(gguf_tok):
    assert isinstance(gguf_tok, Tokenizer)
    assert gguf_tok.bos_id == 1
    assert {0, 2} <= gguf_tok.eos_ids  # <|endoftext|> and <|im_end|> end generation
    for text in TEXTS:
        assert gguf_tok.decode(gguf_tok.encode(text)) == text
    # SmolLM2's vocabulary does not ask for BOS, and llama.cpp honours that
    assert gguf_tok.encode("Hello world") == gguf_tok.encode("Hello world", add_bos=False)


def test_special_tokens_parsed_only_when_asked(gguf_tok, hf_tok):
    for tok in (gguf_tok, hf_tok):
        assert tok.encode("<|im_end|>", special=True) == [2]
        plain = tok.encode("<|im_end|>", special=False)
        assert len(plain) > 1 and 2 not in plain


def test_hf_tokenizer_matches_llama_cpp(gguf_tok, hf_tok):
    for text in TEXTS:
        for special in (False, True):
            assert hf_tok.encode(text, special=special) == gguf_tok.encode(text, special=special), text
        assert hf_tok.decode(hf_tok.encode(text)) == text


def test_chat_template_from_metadata(gguf_tok, hf_tok):
    messages = [{"role": "user", "content": "What is 2+2?"}]
    prompt = gguf_tok.chat_prompt(messages)
    assert prompt.endswith("<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n")
    assert "<|im_start|>system\n" in prompt  # SmolLM2's template adds a default system message
    assert not gguf_tok.chat_prompt(messages, add_generation_prompt=False).endswith("assistant\n")
    assert hf_tok.chat_prompt(messages) == prompt


def _hf_dir_with_template(tmp_path, smollm2_path, template):
    d = tmp_path / "t"
    d.mkdir()
    write_hf_tokenizer(d, smollm2_path)
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    cfg["chat_template"] = template
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    return load_tokenizer(str(d))


def test_template_raise_exception_and_tokens(tmp_path, smollm2_path):
    tok = _hf_dir_with_template(
        tmp_path, smollm2_path,
        "{% if messages[0]['role'] != 'user' %}{{ raise_exception('first message must be from the user') }}{% endif %}"
        "{{ bos_token }}{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}{{ eos_token }}{% endfor %}",
    )
    assert tok.chat_prompt([{"role": "user", "content": "x"}]) == "<|im_start|>[user]x<|im_end|>"
    with pytest.raises(HomespecError) as err:
        tok.chat_prompt([{"role": "assistant", "content": "x"}])
    assert "first message" in err.value.message


def test_template_is_sandboxed(tmp_path, smollm2_path):
    from jinja2.exceptions import SecurityError

    tok = _hf_dir_with_template(tmp_path, smollm2_path, "{{ messages.__class__.__mro__[1].__subclasses__() }}")
    with pytest.raises(SecurityError):
        tok.chat_prompt([{"role": "user", "content": "x"}])


def test_bad_paths(tmp_path):
    bogus = tmp_path / "model.gguf"
    bogus.write_bytes(b"PK\x03\x04 not a gguf")
    with pytest.raises(FormatError):
        load_tokenizer(str(bogus))
    with pytest.raises(HomespecError):
        load_tokenizer(str(tmp_path / "missing.gguf"))
    with pytest.raises(FormatError):
        load_tokenizer(str(tmp_path))  # a directory without tokenizer.json


def test_gguf_tokenizer_loads_silently(smollm2_path, capfd):
    """Loading the vocabulary prints nothing: llama.cpp's warning about the vocab-only context
    exceeding the (absent) training context stays in homespec's log router."""
    pytest.importorskip("llama_cpp")
    from homespec.backends.llamacpp.tokenizer import LlamaCppTokenizer

    LlamaCppTokenizer(str(smollm2_path))
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")


def test_kept_pieces_are_llama_cpps(smollm2_path):
    """Each token's piece is asked of llama.cpp once and kept: every id of the vocabulary, with and
    without special tokens spelled out, decodes as llama.cpp's own piece does, the first time and
    the next, and a run of ids as their pieces joined (after BOS without a leading space)."""
    llama_cpp = pytest.importorskip("llama_cpp")
    from homespec.backends.llamacpp.tokenizer import LlamaCppTokenizer

    tok = LlamaCppTokenizer(str(smollm2_path))
    vocab = tok._llama._model.vocab

    def piece(i: int, special: bool) -> bytes:
        buf = ctypes.create_string_buffer(256)
        n = llama_cpp.llama_token_to_piece(vocab, i, buf, 256, 0, special)
        assert 0 <= n <= 256
        return buf.raw[:n]

    ids = range(tok.n_vocab)
    for special in (False, True):
        first = [tok.token_bytes(i) if special else tok._bytes((i,), False) for i in ids]
        assert first == [piece(i, special) for i in ids]
        assert [tok._bytes((i,), special) for i in ids] == first
    text = "Hello ---------------------------------------------- world <|im_end|>"
    run = tok.encode(text, add_bos=False, special=True)
    assert tok.decode(run, special=True).encode() == b"".join(piece(i, True) for i in run)
    assert tok.decode(run).encode() == b"".join(piece(i, False) for i in run)
    if tok.bos_id is not None:
        assert tok.decode([tok.bos_id, *run]).encode() == b"".join(piece(i, False) for i in run).removeprefix(b" ")
