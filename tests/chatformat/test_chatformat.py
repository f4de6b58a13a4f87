"""Tool calls and thinking read back in each family's syntax (homespec/chatformat/), streamed and
whole, and each format's forced-call grammar accepting the format's own call text on the real
SmolLM2 vocabulary."""

from __future__ import annotations

import json

import pytest

from homespec.chatformat import tool_format
from homespec.chatformat.deepseek import DeepSeek
from homespec.chatformat.glm import Glm
from homespec.chatformat.harmony import Harmony
from homespec.chatformat.hermes import Hermes
from homespec.chatformat.llama3 import Llama3
from homespec.chatformat.mistral import Mistral
from homespec.chatformat.reasoning import split_thinking
from homespec.chatformat.split import Splitter

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
ARGS = {"city": "Paris"}

# each format: an answer with text (where the format has any) and one call, as its models write it
ANSWERS = {
    "hermes": (Hermes(), 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
               "Let me check."),
    "llama3": (Llama3(), '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}', ""),
    "mistral": (Mistral(), 'Sure.[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]', "Sure."),
    "mistral-args": (Mistral(), '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}', ""),
    "harmony": (Harmony(), '<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>'
                'commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}', ""),
    "deepseek": (DeepSeek(), 'Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n'
                 '```json\n{"city": "Paris"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>', "Checking."),
    "deepseek-v3.1": (DeepSeek(fenced=False), '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>'
                      '{"city": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>', ""),
    "glm": (Glm(), 'Ok.<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>',
            "Ok."),
}


@pytest.mark.parametrize("name", list(ANSWERS))
def test_a_call_is_read_back_whole(name):
    fmt, text, content = ANSWERS[name]
    parsed = fmt.parse(text, final=True)
    assert parsed.content == content
    assert [(c.name, json.loads(c.arguments)) for c in parsed.calls] == [("get_weather", ARGS)]
    assert parsed.calls[0].id.startswith("call_")


@pytest.mark.parametrize("name", list(ANSWERS))
def test_streamed_pieces_join_to_the_whole_reading(name):
    """Token by token (here: character by character) the splitter never releases a marker's
    beginning as content, opens the call once, and its argument pieces join to the final arguments."""
    fmt, text, content = ANSWERS[name]
    split = Splitter(fmt)
    pieces = [split.update(text[:n]) for n in range(1, len(text) + 1)]
    pieces.append(split.last(text, whole=True))
    streamed = "".join(p.content for p in pieces)
    calls = [c for p in pieces for c in p.calls]
    assert streamed == content
    assert [c.name for c in calls if c.opens] == ["get_weather"] and calls[-1].status == "completed"
    final = split.final(text).calls
    assert "".join(c.arguments for c in calls) == final[0].arguments and json.loads(final[0].arguments) == ARGS
    assert {c.id for c in calls} == {final[0].id}  # the message's call is the streamed one


def test_text_that_is_not_a_call_stays_content():
    assert Hermes().parse("Use <tool_call> tags to call", final=True).content == "Use <tool_call> tags to call"
    assert Llama3().parse("{not json} at all", final=True).content == "{not json} at all"
    assert Mistral().parse("no calls here", final=True).calls == ()


def test_thinking_is_split_out_and_streams():
    assert split_thinking("<think>Hmm.</think>\nParis.", False, True) == ("Hmm.", "Paris.")
    assert split_thinking("Hmm.</think>Paris.", True, True) == ("Hmm.", "Paris.")  # the template opened it
    assert split_thinking("<think>still going", False, True) == ("still going", "")
    assert split_thinking("<thi", False, False) == ("", "")  # may be opening: hold
    text = "<think>Let me think.</think>\nThe answer is 4."
    split = Splitter(None, "deepseek")
    pieces = [split.update(text[:n], False) for n in range(1, len(text) + 1)] + [split.update(text, True)]
    assert "".join(p.reasoning for p in pieces) == "Let me think."
    assert "".join(p.content for p in pieces) == "The answer is 4."
    legacy = Splitter(None, "deepseek-legacy").read(text, True)
    assert legacy.content.startswith("<think>Let me think.</think>") and legacy.reasoning == "Let me think."
    assert Splitter(None, "none").read(text, True).content == text


def test_harmony_reads_its_channels():
    text = ("<|channel|>analysis<|message|>User greets.<|end|><|start|>assistant<|channel|>final<|message|>"
            "Hello!<|return|>")
    parsed = Splitter(Harmony()).read(text, True)
    assert (parsed.reasoning, parsed.content, parsed.calls) == ("User greets.", "Hello!", ())


@pytest.mark.parametrize("source, name", [
    ("{% for m in messages %}{{ m.content }}{% endfor %}", None),  # no tools at all
    ("{{ tools }}<tool_call>", "hermes"), ("{{ tools }}[TOOL_CALLS]", "mistral"),
    ("{{ tools }}<|channel|>", "harmony"), ("{{ tools }}<｜tool▁calls▁begin｜>", "deepseek"),
    ("{{ tools }}<tool_call><arg_key>", "glm"), ("{{ tools }}<|python_tag|>", "llama3"),
])
def test_the_format_is_read_from_the_template(source, name):
    fmt = tool_format(source)
    assert (fmt.name if fmt is not None else None) == name


@pytest.fixture(scope="module")
def smol():
    from homespec.backends.tokenizer import load_tokenizer
    from homespec.embedded import smollm2_path
    from homespec.grammar import vocabulary

    tok = load_tokenizer(str(smollm2_path()))
    return tok, vocabulary(tok)


@pytest.mark.parametrize("name", ["hermes", "llama3", "glm"])
def test_a_forced_calls_grammar_accepts_the_formats_own_call(smol, name):
    """The grammar of a forced call takes the canonical call text, token by token, to its end
    (formats whose markers are special tokens in their own vocabularies are covered by their parsers)."""
    from homespec.grammar import lark
    from homespec.server.constrain import marker_term

    tok, vocab = smol
    fmt = {"hermes": Hermes(), "llama3": Llama3(), "glm": Glm()}[name]
    text = {"hermes": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
            "llama3": '{"name": "get_weather", "parameters": {"city": "Paris"}}',
            "glm": "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>"}[name]
    guide = lark(fmt.call_grammar([WEATHER], False, marker_term(tok, vocab)), vocab).start()
    ids = tok.encode(text, add_bos=False)
    assert guide.matcher.validate_tokens(ids) == len(ids)
    guide.advance(ids)
    assert guide.matcher.is_accepting()
