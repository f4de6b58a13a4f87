"""The server's pure parts, without a model: request bodies checked as OpenAI checks them, each
refusal one sentence naming its field; response bodies in OpenAI's shapes with their figures."""

from __future__ import annotations

import pytest
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from char_tokenizer import CharTokenizer
from homespec.server.errors import validation_error
from homespec.server.schemas import ChatRequest, CompletionRequest
from homespec.server.shapes import Answer, chunk, completion, timings
from homespec.engine.responses import Finish
from homespec.speculative.steps import Step

HI = [{"role": "user", "content": "hi"}]


def _refusal(model, body):
    with pytest.raises(ValidationError) as e:
        model.model_validate(body)
    err = validation_error(RequestValidationError([{**x, "loc": ("body", *x["loc"])} for x in e.value.errors()]))
    return err.status, err.param, err.message


@pytest.mark.parametrize("model, body, param, words", [
    (ChatRequest, {"messages": []}, "messages", "messages is empty"),
    (ChatRequest, {"messages": HI, "temperature": "hot"}, "temperature", "should be a number"),
    (ChatRequest, {"messages": HI, "stop": 5}, "stop", "a string or a list of strings"),
    (ChatRequest, {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages.0.content",
     "a list of text parts"),
    (ChatRequest, {"messages": HI, "max_tokens": "5"}, "max_tokens", "integer"),
    (ChatRequest, {"messages": HI, "max_tokens": 0}, "max_tokens", "greater than or equal to 1"),
    (ChatRequest, {"messages": HI, "top_p": 0}, "top_p", "greater than 0"),
    (CompletionRequest, {"prompt": ["a", "b"]}, "prompt", "a list of token ids"),
])
def test_a_bad_field_is_one_sentence_naming_it(model, body, param, words):
    status, got_param, message = _refusal(model, body)
    assert status == 400 and got_param == param and words in message and "\n" not in message


def test_known_fields_are_read_and_unknown_ones_ignored():
    r = ChatRequest.model_validate({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                                               {"type": "text", "text": "b"}]}],
                                    "max_completion_tokens": 5, "max_tokens": 9, "stop": "x", "user": "u",
                                    "logit_bias": {"1": 2}})
    assert r.messages[0].text() == "ab" and r.wanted_tokens() == 5 and r.stops() == ("x",)
    # none asked for: the route gives --max-tokens, else OpenAI's default of 16 (homespec/server/completions.py)
    assert CompletionRequest.model_validate({"prompt": [1, 2]}).wanted_tokens() is None


def _finish(reason="length") -> Finish:
    steps = (Step((5,), 0, 0, 3, 0.0, 0.1, 0.1, False), Step((6, 7, 8), 2, 4, 6, 0.01, 0.1, 0.2),
             Step((9,), 0, 4, 7, 0.01, 0.1, 0.1))
    return Finish(reason, "hello", (5, 6, 7, 8, 9), (1, 2, 3), steps, 0.1, 0.3)


def test_a_completion_has_openais_fields_and_the_speculation_figures():
    body = completion(Answer("chat", "m"), _finish())
    assert set(body) >= {"id", "object", "created", "model", "choices", "usage", "timings", "homespec"}
    assert body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-")
    assert body["choices"] == [{"index": 0, "message": {"role": "assistant", "content": "hello", "refusal": None},
                                "logprobs": None, "finish_reason": "length"}]
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8,
                             "prompt_tokens_details": {"cached_tokens": 0},
                             "completion_tokens_details": {"reasoning_tokens": 0}}
    t = timings(_finish())
    assert (t["cache_n"], t["prompt_n"], t["predicted_n"], t["draft_n"], t["draft_n_accepted"]) == (0, 3, 5, 8, 2)
    import dataclasses

    reused = timings(dataclasses.replace(_finish(), cached_tokens=2))  # llama-server: prompt_n excludes cache_n
    assert (reused["cache_n"], reused["prompt_n"]) == (2, 1)
    assert body["homespec"] == {"tokens_per_target_pass": 2.0, "target_passes": 3, "speculative_steps": 2}


@pytest.mark.parametrize("reason, openai_reason", [("eos", "stop"), ("stop", "stop"), ("length", "length"),
                                                   ("context", "length")])
def test_finish_reasons_are_openais(reason, openai_reason):
    assert completion(Answer("text", "m"), _finish(reason))["choices"][0]["finish_reason"] == openai_reason


def test_chunks_carry_the_role_then_text_then_the_finish():
    a = Answer("chat", "m")
    first, text, last = chunk(a, first=True), chunk(a, "he"), chunk(a, fin=_finish())
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert text["choices"][0]["delta"] == {"content": "he"} and text["choices"][0]["finish_reason"] is None
    assert last["choices"][0]["delta"] == {} and last["choices"][0]["finish_reason"] == "length"
    assert "timings" in last and len({first["id"], text["id"], last["id"]}) == 1
    usage = chunk(a, fin=_finish(), usage_only=True)
    assert usage["choices"] == [] and usage["usage"]["total_tokens"] == 8


def test_metrics_render_the_engines_figures_in_prometheus_text():
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from homespec.engine.api import EngineStats
    from homespec.server.metrics import registry

    class Figures:  # an engine's stats() as the collector reads them
        def stats(self):
            return EngineStats(active=1, queued=2, requests_total=3, spec_num_drafts=4, spec_num_draft_tokens=16,
                               spec_num_accepted_tokens=5, spec_accepted_per_pos=[3, 2])

    reg, http = registry(Figures(), "m")
    http.add("/health", 200)
    http.add("/health", 200)
    samples = {(s.name, s.labels.get("position", s.labels.get("status"))): s.value
               for f in text_string_to_metric_families(generate_latest(reg).decode()) for s in f.samples}
    assert samples[("homespec:num_requests_running", None)] == 1
    assert samples[("homespec:num_requests_waiting", None)] == 2
    assert samples[("homespec:spec_decode_num_drafts_total", None)] == 4
    assert samples[("homespec:spec_decode_num_accepted_tokens_per_pos_total", "1")] == 2
    assert samples[("homespec:http_requests_total", "200")] == 2
    assert not any(name.endswith("_created") for name, _ in samples)


def _deltas(text: str):
    from homespec.engine.responses import TextDelta

    return [TextDelta(c, (ord(c),)) for c in text]


def test_a_thinking_answer_streams_reasoning_then_content_and_counts_it():
    """A template that opened a <think> block: the answer's thinking is reasoning_content (streamed as
    its own deltas), what follows </think> the content; usage counts the thinking's tokens."""
    from homespec.server.chat import Turn
    from homespec.server.outputs import ChatOutput

    text = "The user greets.</think>\nHello!"
    fin = Finish("eos", text, tuple(ord(c) for c in text), (1, 2), (), 0.1, 0.2)
    out = ChatOutput(Answer("chat", "m"), CharTokenizer(), Turn("", [1, 2], None, None, "deepseek", starts_open=True))
    chunks = [c for d in _deltas(text) for c in out.stream(d)] + out.end(fin, include_usage=True)
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert "".join(d.get("reasoning_content", "") for d in deltas) == "The user greets."
    assert "".join(d.get("content", "") for d in deltas) == "Hello!"
    assert chunks[-1]["usage"]["completion_tokens_details"]["reasoning_tokens"] == len("The user greets.")
    whole = ChatOutput(Answer("chat", "m"), CharTokenizer(), Turn("", [1, 2], None, None, "deepseek", starts_open=True))
    for d in _deltas(text):
        whole.take(d)
    message = whole.body(fin)["choices"][0]["message"]
    assert (message["reasoning_content"], message["content"]) == ("The user greets.", "Hello!")


def test_a_parsed_call_ends_with_finish_reason_tool_calls():
    from homespec.chatformat.hermes import Hermes
    from homespec.server.chat import Turn
    from homespec.server.outputs import ChatOutput

    text = '<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>'
    fin = Finish("eos", text, tuple(ord(c) for c in text), (1,), (), 0.1, 0.2)
    out = ChatOutput(Answer("chat", "m"), CharTokenizer(), Turn("", [1], None, Hermes(), "none", False))
    for d in _deltas(text):
        out.take(d)
    choice = out.body(fin)["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    assert choice["message"]["tool_calls"][0]["function"] == {"name": "f", "arguments": '{"x": 1}'}
