"""Calls streamed while they are written (homespec/chatformat/split.py, partial.py), in every tool
format, on hand-written answers with long arguments: the call opens once its name and first key are
certain, its argument pieces join to the final `arguments` byte for byte, a cut inside a call ends
it `incomplete` and never leaks its markup. Pure, no model."""

from __future__ import annotations

import json
import random

import pytest

from homespec.chatformat.deepseek import DeepSeek
from homespec.chatformat.generic import Generic
from homespec.chatformat.glm import Glm
from homespec.chatformat.harmony import Harmony
from homespec.chatformat.hermes import Hermes
from homespec.chatformat.llama3 import Llama3
from homespec.chatformat.mistral import Mistral
from homespec.chatformat.split import Splitter

FILE = {"path": "src/app.py", "content": 'def main():\n    print("héllo \\u263a")\n' * 3, "mode": 420,
        "tags": ["a", {"b": [1, 2.5e3, None, True]}]}
TIME = {"zone": "Europe/Paris"}
COMPACT = json.dumps(FILE, separators=(",", ":"))  # as a model may write it: the text is kept as written
SPACED = json.dumps(FILE, indent=1, ensure_ascii=False)
DS_BEGIN, DS_CALL, DS_SEP, DS_END, DS_ENDS = ("<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>",
                                              "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>")


def _glm(name: str, args: dict) -> str:
    pairs = "".join(f"<arg_key>{k}</arg_key>\n<arg_value>{v if isinstance(v, str) else json.dumps(v)}</arg_value>\n"
                    for k, v in args.items())
    return f"<tool_call>{name}\n{pairs}</tool_call>"


# each format: (format, an answer with two calls (one where the format writes one), its content)
ANSWERS = {
    "hermes": (Hermes(), "I will write it.\n<tool_call>\n" + json.dumps({"name": "write_file", "arguments": FILE})
               + "\n</tool_call>\n<tool_call>\n" + json.dumps({"name": "get_time", "arguments": TIME})
               + "\n</tool_call>", "I will write it."),
    "hermes-compact": (Hermes(), '<tool_call>\n{"name":"write_file","arguments":' + COMPACT + "}\n</tool_call>", ""),
    "llama3": (Llama3(), "<|python_tag|>" + json.dumps({"name": "write_file", "parameters": FILE}) + "; "
               + json.dumps({"name": "get_time", "parameters": TIME}), ""),
    "mistral": (Mistral(), "Sure.[TOOL_CALLS]" + json.dumps([{"name": "write_file", "arguments": FILE},
                                                             {"name": "get_time", "arguments": TIME}]), "Sure."),
    "mistral-args": (Mistral(), "[TOOL_CALLS]write_file[ARGS]" + SPACED + "[TOOL_CALLS]get_time[ARGS]"
                     + json.dumps(TIME), ""),
    "harmony": (Harmony(), "<|channel|>analysis<|message|>Write it.<|end|><|start|>assistant<|channel|>commentary "
                "to=functions.write_file <|constrain|>json<|message|>" + json.dumps(FILE) + "<|call|>", ""),
    "deepseek": (DeepSeek(), "Writing." + DS_BEGIN + DS_CALL + "function" + DS_SEP + "write_file\n```json\n"
                 + json.dumps(FILE) + "\n```" + DS_END + DS_CALL + "function" + DS_SEP + "get_time\n```json\n"
                 + json.dumps(TIME) + "\n```" + DS_END + DS_ENDS, "Writing."),
    "deepseek-v3.1": (DeepSeek(fenced=False), DS_BEGIN + DS_CALL + "write_file" + DS_SEP + COMPACT + DS_END + DS_CALL
                      + "get_time" + DS_SEP + json.dumps(TIME) + DS_END + DS_ENDS, ""),
    "glm": (Glm(), "Ok." + _glm("write_file", FILE) + "\n" + _glm("get_time", TIME), "Ok."),
    "generic": (Generic(), json.dumps({"tool_calls": [{"name": "write_file", "arguments": FILE},
                                                      {"name": "get_time", "arguments": TIME}]}), ""),
    "generic-one": (Generic(parallel=False), json.dumps({"tool_call": {"name": "write_file", "arguments": FILE}}), ""),
}


def _stream(fmt, text: str, steps: list[int], whole: bool = True):
    """The answer fed in growing prefixes ending at each of `steps`, then its end."""
    split = Splitter(fmt, "none")
    deltas = [split.update(text[:n]) for n in steps]
    deltas.append(split.last(text, whole))
    return deltas, split.final(text, whole)


def _calls(deltas) -> dict[int, list]:
    out: dict[int, list] = {}
    for d in deltas:
        for p in d.calls:
            out.setdefault(p.index, []).append(p)
    return out


@pytest.mark.parametrize("name", list(ANSWERS))
@pytest.mark.parametrize("chunking", ["characters", "tokens"])
def test_argument_pieces_join_to_the_final_arguments(name, chunking):
    fmt, text, content = ANSWERS[name]
    steps = list(range(1, len(text) + 1))
    if chunking == "tokens":  # pieces of 1-12 characters, as a speculative step may commit several tokens
        rng = random.Random(name)
        steps = sorted(set(rng.sample(steps, len(steps) // 6)) | {len(text)})
    deltas, final = _stream(fmt, text, steps)
    assert "".join(d.content for d in deltas) == content
    calls = _calls(deltas)
    assert len(calls) == len(final.calls) >= 1
    for i, call in enumerate(final.calls):
        pieces = calls[i]
        assert pieces[0].opens and not any(p.opens for p in pieces[1:]) and pieces[0].name == call.name
        assert {p.id for p in pieces} == {call.id} and pieces[-1].status == "completed"
        assert "".join(p.arguments for p in pieces) == call.arguments  # byte for byte
        assert call.arguments.startswith("{")
    args = json.loads(final.calls[0].arguments)
    assert args == FILE and final.calls[0].name == "write_file"
    if chunking == "characters":  # a long call streams: many pieces, the first before the call closes
        assert len([p for p in calls[0] if p.arguments]) > 5
        assert calls[0][0].status == "writing"


@pytest.mark.parametrize("name", ["hermes", "llama3", "mistral", "mistral-args", "harmony", "deepseek", "generic"])
def test_the_call_opens_only_once_its_name_and_first_key_are_written(name):
    fmt, text, _ = ANSWERS[name]
    key = text.index('"path"') if '"path"' in text else text.index("path")
    before = Splitter(fmt, "none")
    assert not any(d.calls for d in (before.update(text[:n]) for n in range(1, key + 4)))  # '"pa'
    after = Splitter(fmt, "none").update(text[:key + len('"path":')])
    (opening,) = after.calls
    assert opening.opens and opening.name == "write_file" and opening.arguments.rstrip().endswith('"path":')


def test_glm_releases_each_pair_once_its_value_is_closed():
    fmt, text, _ = ANSWERS["glm"]
    split = Splitter(fmt, "none")
    at = text.index("</arg_key>") + len("</arg_key>")
    (opening,) = split.update(text[:at]).calls
    assert opening.arguments == "{"
    value_end = text.index("</arg_value>") + len("</arg_value>")
    assert not split.update(text[:value_end - 3]).calls  # "src/app.py" might still grow
    (piece,) = split.update(text[:value_end]).calls
    assert piece.arguments == '"path": "src/app.py"'


@pytest.mark.parametrize("name", list(ANSWERS))
def test_a_cut_inside_a_call_ends_it_incomplete_and_leaks_nothing(name):
    """max_tokens inside the first call's arguments: no piece after the cut, the call ends
    `incomplete`, the final reading drops it, and no markup goes out as content."""
    fmt, text, content = ANSWERS[name]
    cut = text.index("héllo") if "héllo" in text else text.index("h\\u00e9llo")
    deltas, final = _stream(fmt, text[:cut], list(range(1, cut + 1)), whole=False)
    calls = _calls(deltas)
    if name == "glm":  # a pair goes out once its value is closed: "path" was
        assert calls[0][0].opens
    ends = [p for p in calls[0] if p.status != "writing"]
    assert [p.status for p in ends] == ["incomplete"] and ends[0].arguments == "" and calls[0][-1] is ends[0]
    assert final.calls == () and final.content == content
    streamed = "".join(d.content for d in deltas)
    assert streamed == content and "tool" not in streamed.lower() and "{" not in streamed


def test_a_cut_after_a_complete_call_keeps_it():
    fmt, text, content = ANSWERS["hermes"]
    cut = text.index("get_time") + 3
    deltas, final = _stream(fmt, text[:cut], list(range(1, cut + 1)), whole=False)
    assert [c.name for c in final.calls] == ["write_file"] and final.content == content
    assert [p.status for p in _calls(deltas)[0]][-1] == "completed" and 1 not in _calls(deltas)


def test_arguments_that_are_not_an_object_go_out_whole():
    """A call whose arguments are a string of JSON (some fine-tunes write them so) cannot stream
    them: the call opens complete, its arguments the string's JSON."""
    text = '<tool_call>\n{"name": "get_time", "arguments": "{\\"zone\\": \\"UTC\\"}"}\n</tool_call>'
    deltas, final = _stream(Hermes(), text, list(range(1, len(text) + 1)))
    (piece,) = [p for d in deltas for p in d.calls]
    assert piece.opens and piece.status == "completed" and piece.arguments == '{"zone": "UTC"}'
    assert final.calls[0].arguments == '{"zone": "UTC"}'


def test_prose_about_calls_opens_none():
    text = 'Write <tool_call> then {"name": "x"} to call.'
    deltas, final = _stream(Hermes(), text, list(range(1, len(text) + 1)))
    assert not any(d.calls for d in deltas) and final.content == text


def test_a_call_the_model_breaks_ends_incomplete():
    """Where no grammar holds the syntax (tool_choice auto on the template's own format) a model
    may break a call after it opened: it ends `incomplete`, and the final reading has no call."""
    text = '<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"</tool_call>'
    deltas, final = _stream(Hermes(), text, list(range(1, len(text) + 1)))
    pieces = [p for d in deltas for p in d.calls]
    assert pieces[0].opens and pieces[-1].status == "incomplete" and final.calls == ()


def test_a_character_still_decoding_is_held_back():
    split = Splitter(Generic(), "none")
    head = '{"tool_call": {"name": "note", "arguments": {"text": "caf'
    (opening,) = split.update(head + "\ufffd").calls
    assert opening.arguments == '{"text": "caf'
    (piece,) = split.update(head + 'é"}').calls
    assert piece.arguments == 'é"}' and piece.status == "writing"
    (done,) = split.last(head + 'é"}}}', True).calls
    assert done.status == "completed" and done.arguments == ""


def _agree(deltas, final) -> dict[int, list]:
    """The stream and the final reading say the same: the content streamed is the final content;
    each index is one call (one id, one name, opened once); the calls completed are the final
    reading's calls, in order, with their ids and their pieces joined to their arguments; any
    other call streamed ended `incomplete` and is not in the final reading."""
    assert "".join(d.content for d in deltas) == final.content
    calls = _calls(deltas)
    done = []
    for index in sorted(calls):
        pieces = calls[index]
        assert pieces[0].opens and not any(p.opens for p in pieces[1:])
        assert len({p.id for p in pieces}) == 1 and len({p.name for p in pieces}) == 1
        assert [p.status for p in pieces[:-1]] == ["writing"] * (len(pieces) - 1)
        assert pieces[-1].status in ("completed", "incomplete")
        if pieces[-1].status == "completed":
            done.append((pieces[0].id, pieces[0].name, "".join(p.arguments for p in pieces)))
    assert done == [(c.id, c.name, c.arguments) for c in final.calls]
    return calls


def _by_character(fmt, text: str):
    return _stream(fmt, text, list(range(1, len(text) + 1)))


def test_llama3_keeps_a_call_streamed_before_text_it_cannot_read():
    """A call then prose (tool_choice auto, no grammar): the call streamed complete stays a call,
    the prose after it is content, streamed and final alike."""
    text = '{"name":"f","parameters":{"x":1}} I\'ll check.'
    deltas, final = _by_character(Llama3(), text)
    calls = _agree(deltas, final)
    assert [(c.name, c.arguments) for c in final.calls] == [("f", '{"x":1}')]
    assert final.content == "I'll check." and list(calls) == [0]
    assert [(c.name, c.arguments) for c in Llama3().parse(text, True).calls] == [("f", '{"x":1}')]


def test_llama3_prose_first_stays_content():
    text = 'I\'ll check: {"name":"f","parameters":{"x":1}}'
    deltas, final = _by_character(Llama3(), text)
    _agree(deltas, final)
    assert final.calls == () and final.content == text


@pytest.mark.parametrize("fmt, text, content, names", [
    (Mistral(), 'Sure.[TOOL_CALLS]f[ARGS]{"x": 1}[TOOL_CALLS]g[ARGS]{"y": oops}', 'Sure.[TOOL_CALLS]g[ARGS]{"y": oops}',
     ["f"]),
    (Mistral(), 'Sure.[TOOL_CALLS][{"name": "f", "arguments": {"x": 1}}, {"name": "g", "arguments": {"y": oops}}]',
     'Sure.{"name": "g", "arguments": {"y": oops}}]', ["f"]),
    (Mistral(), '[TOOL_CALLS][{"name": "f", "arguments": {"x": 1}} and then', "and then", ["f"]),
    (DeepSeek(fenced=False), "Ok." + DS_BEGIN + DS_CALL + 'f' + DS_SEP + '{"x": 1}' + DS_END + DS_CALL + "g" + DS_SEP
     + '{"y": oops}' + DS_END + DS_ENDS, "Ok." + DS_CALL + "g" + DS_SEP + '{"y": oops}' + DS_END + DS_ENDS, ["f"]),
])
def test_calls_read_before_an_unreadable_rest_stay_calls(fmt, text, content, names):
    """The final reading keeps the calls it read and turns only the rest into content, so a call
    streamed complete is never taken back; a call opened in the rest ends `incomplete`."""
    deltas, final = _by_character(fmt, text)
    calls = _agree(deltas, final)
    assert [c.name for c in final.calls] == names and final.content == content
    assert [c.name for c in fmt.parse(text, True).calls] == names
    assert all(pieces[-1].status == "incomplete" for i, pieces in calls.items() if i >= len(names))


@pytest.mark.parametrize("broken", ['{"name": "f", "arguments": {"x": 1}}{"y": 2}',
                                    '{"name": "f", "arguments": {"x": 1, "y"}}'])
def test_a_call_that_fails_to_close_ends_incomplete_and_the_next_keeps_its_own_id(broken):
    """A call opened while written that fails when its block closes (two objects in one block,
    malformed JSON) ends `incomplete` there, its block content; the next call opens under its own
    index, id and name, with its own arguments."""
    block = f"<tool_call>\n{broken}\n</tool_call>"
    good = '<tool_call>\n{"name": "g", "arguments": {"z": 3}}\n</tool_call>'
    text = block + "\n" + good
    deltas, final = _by_character(Hermes(), text)
    calls = _agree(deltas, final)
    assert [p.name for p in calls[0]] == ["f"] * len(calls[0]) and calls[0][-1].status == "incomplete"
    assert [(p.name, p.status) for p in calls[1]][-1] == ("g", "completed") and calls[1][0].id != calls[0][0].id
    assert [(c.name, c.arguments) for c in final.calls] == [("g", '{"z": 3}')] and final.content == block
    end = next(n for n, d in enumerate(deltas) if any(p.status == "incomplete" for p in d.calls))
    assert block.startswith(deltas[end].content) and deltas[end].content  # ended as its text goes out
    assert not any(d.content for d in deltas[:end])


def test_harmony_malformed_arguments_join_the_pieces_sent():
    text = ("<|channel|>commentary to=functions.f <|constrain|>json<|message|>"
            '{"x": 1, "y": oops}<|call|>')
    deltas, final = _by_character(Harmony(), text)
    calls = _agree(deltas, final)
    assert [(c.name, c.arguments) for c in final.calls] == [("f", '{"x": 1, "y": oops}')]
    assert len(calls[0]) > 2 and calls[0][0].status == "writing"


def test_a_call_lost_and_another_like_it_in_one_step_are_two_calls():
    """The failed call and a call of the same name whose arguments begin as the failed one's did
    arrive in one step: they are told apart by their place in the answer, not their place in the
    list of calls (the first ends `incomplete` before its text goes out, the second opens anew)."""
    block = '<tool_call>\n{"name": "f", "arguments": {"x": 1}}{"y": 2}\n</tool_call>'
    text = block + '\n<tool_call>\n{"name": "f", "arguments": {"x": 1, "z": 3}}\n</tool_call>'
    deltas, final = _stream(Hermes(), text, [block.index('"x"') + 4, len(text)])
    calls = _agree(deltas, final)
    assert [p.status for p in calls[0]] == ["writing", "incomplete"] and calls[1][0].opens
    assert deltas[1].carried[-1].status == "incomplete" and deltas[1].content == block
    assert [(c.name, c.arguments) for c in final.calls] == [("f", '{"x": 1, "z": 3}')]
