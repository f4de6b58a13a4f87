"""homespec.session: the incremental detokenizer on the real SmolLM2 tokenizer, stop strings in
one layer, and Session.stream's responses against the decode loop they come from."""

from __future__ import annotations

import random

import pytest

from homespec.engine.detok import Detokenizer
from homespec.engine.run import decode
from homespec.session import Finish, RunOptions, Session, StepFigures, TextDelta, final
from homespec.speculative.steps import Limits

TEXTS = [
    "Why is the sky blue? Answer in one sentence.",
    "Emoji: 🌊🐟🚀 and a family 👨‍👩‍👧‍👦 with flags 🇫🇷🇯🇵, then ✨ sparkles ✨.",
    "Multibyte: naïve café, Ærøskøbing, Straße, Ελληνικά, русский текст, עברית, العربية.",
    "中文的句子，日本語の文章、한국어 문장. 数学: ∑ ∫ ∂ √ ∞ ≠ ≤ ≥ ±.",
    "Code:\n```python\ndef f(x):\n    return x ** 2  # square ²\n```\n\n\tTabs and  double  spaces.",
    "<|im_start|>user\nspecial-looking text<|im_end|> stays text.",
    "   leading spaces, trailing spaces   ",
    "Mixed: a🙂b😀c🎉d, 1½ cups, 25°C, €5, ¥300, ₹70, ™ © ®.",
]


@pytest.fixture(scope="module")
def tok(smollm2_path):
    from homespec.backends.tokenizer import load_tokenizer

    t = load_tokenizer(str(smollm2_path))
    yield t
    t.close()


def _corpus() -> list[str]:
    from homespec.promptsets import load_prompts

    return TEXTS + [" ".join(p.turns) for p in load_prompts("test")[:40]]


def _pieces(tok, ids, stop=(), seed=0, most=4) -> tuple[list[str], Detokenizer]:
    """Feed `ids` in random chunks of 1 to `most` ids (as speculative steps emit them)."""
    rng = random.Random(seed)
    d = Detokenizer(tok, stop)
    out, i = [], 0
    while i < len(ids):
        n = rng.randint(1, most)
        out.append(d.push(ids[i:i + n]))
        i += n
    out.append(d.flush())
    return out, d


def test_incremental_text_equals_the_full_decode(tok):
    split_chars = 0
    for seed, text in enumerate(_corpus()):
        ids = tok.encode(text, add_bos=False)
        split_chars += sum("\ufffd" in tok.decode([i]) for i in ids)
        for most in (1, 4):  # one id at a time, and random chunks
            pieces, _ = _pieces(tok, ids, seed=seed, most=most)
            assert "".join(pieces) == tok.decode(ids), text
            assert not any("\ufffd" in p for p in pieces)  # no half character is ever released
    assert split_chars > 10  # the corpus does split characters across tokens


class _Counting:
    """The real tokenizer, counting the ids it is asked to decode."""

    def __init__(self, tok):
        self.tok, self.decoded = tok, 0

    def decode(self, ids, special=False):
        self.decoded += len(ids)
        return self.tok.decode(ids, special)


def test_control_tokens_cost_a_push_its_own_ids_not_the_whole_run(tok):
    """A model stuck on a control token (it decodes to nothing) for thousands of steps: each push
    decodes a few ids, not every one since the last text, and the text around the run is the full
    decode's."""
    special = tok.encode("<|im_start|>", add_bos=False, special=True)
    assert len(special) == 1 and tok.decode(special) == ""
    before, after = tok.encode("Hello there,", add_bos=False), tok.encode(" and again.", add_bos=False)
    ids = before + special * 3000 + after
    counting = _Counting(tok)
    d = Detokenizer(counting)
    text = "".join(d.push(ids[i:i + 3]) for i in range(0, len(ids), 3)) + d.flush()
    assert text == tok.decode(ids) == tok.decode(before + after)
    assert counting.decoded < 20 * len(ids)  # was ~len(ids)**2 / 3 (1.5 million ids) with the run kept
    # a run at the very start, behind a BOS (which takes the next piece's leading space): as the full decode
    assert tok.bos_id is not None and tok.decode([tok.bos_id, *tok.encode(" Hello", add_bos=False)]) == "Hello"
    for head in ([tok.bos_id], before):
        ids = head + special * 500 + tok.encode(" Hello", add_bos=False)
        d = Detokenizer(tok)
        assert "".join(d.push([i]) for i in ids) + d.flush() == tok.decode(ids)


def test_a_character_split_across_tokens_waits_for_its_last_byte(tok):
    ids = tok.encode("🚀", add_bos=False)
    assert len(ids) > 1
    d = Detokenizer(tok)
    assert [d.push([i]) for i in ids[:-1]] == [""] * (len(ids) - 1)
    assert d.push(ids[-1:]) == "🚀"


def test_stop_strings_cut_before_their_first_occurrence_and_hold_their_prefix(tok):
    for seed, text in enumerate(_corpus()):
        ids = tok.encode(text, add_bos=False)
        full = tok.decode(ids)
        rng = random.Random(seed)
        a = rng.randrange(1, max(2, len(full) - 3))
        stop = full[a:a + rng.randint(2, 6)]  # often spans tokens; may start mid-token
        pieces, d = _pieces(tok, ids, stop=("never appears", stop), seed=seed)
        assert d.stopped
        assert "".join(pieces) == full[:full.find(stop)], (text, stop)
    # a prefix of a stop string that never completes is released at the end
    ids = tok.encode("The answer is: User", add_bos=False)
    pieces, d = _pieces(tok, ids, stop=("User:",))
    assert not d.stopped and pieces[-1].endswith("User") and "".join(pieces) == tok.decode(ids)


class _NoTokenizer:
    """A backend whose tokenizer cannot be read (the loop must not need it)."""

    def __init__(self, backend):
        self._b = backend

    @property
    def tokenizer(self):
        raise RuntimeError("the loop read the tokenizer")

    def __getattr__(self, name):
        return getattr(self._b, name)


@pytest.fixture(scope="module")
def session():
    s = Session.open(RunOptions(method="ngram", ctx=512, threads=1))
    yield s
    s.close()


def test_the_loop_reads_no_tokenizer_without_eos_or_stop_strings(session):
    prompt = session.backend.tokenizer.encode("Count: one, two, three,", add_bos=True)
    session.backend.reset()
    steps = list(decode(_NoTokenizer(session.backend), None, prompt, limits=Limits(max_tokens=6, stop_at_eos=False)))
    assert sum(len(s.tokens) for s in steps) == 6


def test_stream_yields_figures_text_and_a_finish_that_add_up(session):
    tok = session.backend.tokenizer
    prompt = tok.encode("List the numbers from one to twenty, in words, separated by commas:", add_bos=True)
    responses = list(session.stream(prompt, limits=Limits(max_tokens=40)))
    end = responses[-1]
    assert isinstance(end, Finish) and all(not isinstance(r, Finish) for r in responses[:-1])
    figures = [r for r in responses if isinstance(r, StepFigures)]
    deltas = [r for r in responses if isinstance(r, TextDelta)]
    assert [f.prefill for f in figures] == [True] + [False] * (len(figures) - 1)
    assert tuple(f.step for f in figures) == end.steps
    assert tuple(i for d in deltas for i in d.token_ids) == end.token_ids
    assert "".join(d.text for d in deltas) == end.text == tok.decode(end.token_ids)
    assert end.finish == "length" and len(end.token_ids) == 40 and end.prompt_token_ids == tuple(prompt)
    session.backend.reset()  # the same tokens as the loop alone, plain
    plain = [t for s in decode(session.backend, None, prompt, limits=Limits(max_tokens=40)) for t in s.tokens]
    assert list(end.token_ids) == plain


def test_a_stop_string_ends_the_stream_with_finish_stop(session):
    tok = session.backend.tokenizer
    prompt = tok.encode("List the numbers from one to twenty, in words, separated by commas:", add_bos=True)
    full = final(session.stream(prompt, limits=Limits(max_tokens=40)))
    stop = full.text[len(full.text) // 2:][:5]
    cut = final(session.stream(prompt, limits=Limits(max_tokens=40), stop=(stop,)))
    assert cut.finish == "stop" and cut.text == full.text[:full.text.find(stop)]
    assert len(cut.token_ids) < len(full.token_ids) and full.token_ids[:len(cut.token_ids)] == cut.token_ids
