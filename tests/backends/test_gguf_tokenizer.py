"""A GGUF's tokenizer rebuilt with `tokenizers` from the file's own data (homespec.backends.gguf_tokenizer)
equals llama.cpp's: token ids (special tokens parsed or not), text back, BOS, end-of-generation ids and
the chat template, on the project's own prompt sets, for SmolLM2's vocabulary under every pre-tokenizer
type the rebuild covers, and for the tiny generated families; and the torch backend runs on it with
llama-cpp-python unimportable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from homespec.backends.gguf_tokenizer import GGUFTokenizer, UnsupportedTokenizer
from homespec.promptsets import load_prompts

REPO = Path(__file__).resolve().parents[2]
TEXTS = ["Hello world", " leading space", "numbers 1234567 and 3.14159", "ünïcödé — “quotes” 日本語 😀",
         "def f(x):\n\treturn x**2  # comment\n\n\n", "I'm sure we'll see; they've gone  'quoted' word .",
         "<|im_start|>user\nhi<|im_end|>", "   multiple   spaces\n\n  ", "CamelCaseWords and snake_case_words",
         "$100,000.00 (approx.)", "HELLO World's THINGS'LL", "tab\tand\r\nwindows\rlines", ""]


def _texts(splits: tuple[str, ...]) -> list[str]:
    out = list(TEXTS)
    for split in splits:
        for item in load_prompts(split):
            out += [t if isinstance(t, str) else t["content"] for t in item.turns]
    return out


def _with_pre(path: Path, pre: str, source: Path) -> Path:
    """A GGUF holding `source`'s vocabulary under pre-tokenizer type `pre` (llama.cpp loads its vocabulary only)."""
    from gguf import GGUFWriter

    from tiny_models import _tokenizer_fields

    w = GGUFWriter(str(path), "llama")
    w.add_block_count(1), w.add_embedding_length(64), w.add_head_count(4), w.add_head_count_kv(2)
    w.add_feed_forward_length(128), w.add_context_length(2048)
    for key, value, vtype, sub in _tokenizer_fields(str(source)):
        w.add_key_value(key, pre if key == "tokenizer.ggml.pre" else value, vtype, sub)
    w.write_header_to_file(), w.write_kv_data_to_file(), w.close()
    return path


def _same(ours, theirs, texts: list[str]) -> None:
    assert (ours.bos_id, ours.eos_ids, ours.n_vocab) == (theirs.bos_id, theirs.eos_ids, theirs.n_vocab)
    for text in texts:
        for special in (False, True):
            ids = theirs.encode(text, special=special)
            assert ours.encode(text, special=special) == ids, (text, special)
            assert ours.decode(ids, special=special) == theirs.decode(ids, special=special), (text, special)
        assert ours.encode(text, add_bos=False) == theirs.encode(text, add_bos=False)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."}]
    assert ours.chat_prompt(messages) == theirs.chat_prompt(messages)
    for i in range(0, ours.n_vocab, 97):  # a token's own bytes, partial UTF-8 included
        assert ours.token_bytes(i) == _piece(theirs, i), i


def _piece(tok, i: int) -> bytes:
    """llama.cpp's bytes for one token, special tokens spelled out (llama_token_to_piece with room for any
    piece: llama-cpp-python's own detokenize gives up on pieces over 32 bytes)."""
    import ctypes

    import llama_cpp

    buf = ctypes.create_string_buffer(1024)
    n = llama_cpp.llama_token_to_piece(tok.llama_vocab, i, buf, 1024, 0, True)
    return buf.raw[:n]


@pytest.fixture(scope="module")
def llama_tok():
    pytest.importorskip("llama_cpp")
    from homespec.backends.llamacpp.tokenizer import LlamaCppTokenizer

    return LlamaCppTokenizer


def test_smollm2_on_every_prompt_set(llama_tok, smollm2_path):
    ours, theirs = GGUFTokenizer(smollm2_path), llama_tok(str(smollm2_path))
    try:
        _same(ours, theirs, _texts(("dev", "test", "edit", "edit-dev", "long")))
    finally:
        theirs.close()


@pytest.mark.parametrize("pre", ["llama-bpe", "qwen2", "gpt-4o", "gpt-2", "default", "starcoder"])
def test_each_pre_tokenizer_type_as_llama_cpp_splits(llama_tok, smollm2_path, tmp_path, pre):
    """SmolLM2's vocabulary under another type's regexes (and its ignore_merges / clean_spaces rules)."""
    path = _with_pre(tmp_path / f"{pre}.gguf", pre, smollm2_path)
    ours, theirs = GGUFTokenizer(path), llama_tok(str(path))
    try:
        _same(ours, theirs, _texts(("dev", "edit", "long")))
    finally:
        theirs.close()


def test_the_tiny_families_tokenize_as_llama_cpp(llama_tok, tmp_path):
    from tiny_families import FAMILIES, make_family_gguf

    texts = _texts(("edit",))[:80]
    for family in FAMILIES:
        path = make_family_gguf(tmp_path / f"{family}.gguf", family)
        ours, theirs = GGUFTokenizer(path), llama_tok(str(path))
        try:
            _same(ours, theirs, texts)
        finally:
            theirs.close()


def test_a_vocabulary_it_does_not_rebuild_is_said_so(smollm2_path, tmp_path):
    with pytest.raises(UnsupportedTokenizer, match="pre-tokenizer 'jais-2'"):
        GGUFTokenizer(_with_pre(tmp_path / "x.gguf", "jais-2", smollm2_path))


def test_the_torch_backend_runs_a_gguf_without_llama_cpp(smollm2_path):
    """generate --backend torch on the embedded GGUF in a process where `import llama_cpp` fails."""
    pytest.importorskip("torch")
    code = ("import sys; sys.modules['llama_cpp'] = None; from homespec.cli import main; "
            f"sys.exit(main(['generate', '--backend', 'torch', '--device', 'cpu', '--method', 'none', '--model', "
            f"{str(smollm2_path)!r}, '-p', 'Name a colour.', '-n', '6', '--json']))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=REPO,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 0, r.stderr[-3000:]
    assert len(__import__("json").loads(r.stdout.splitlines()[-1])["token_ids"]) == 6
