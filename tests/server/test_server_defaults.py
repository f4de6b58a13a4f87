"""serve's defaults for what a request leaves out: --max-tokens (tests/server/test_server_agents.py) and
the sampling flags --temperature, --top-k, --top-p (llama-server's --temp, --top-k, --top-p), which an
agent that sends no sampling fields (Codex CLI) gets; a request's own values win."""

from __future__ import annotations

import json

import pytest

from homespec.server.answers import Defaults
from homespec.server.schemas import ChatRequest

openai = pytest.importorskip("openai")
from test_server import Server  # noqa: E402 - the subprocess server of tests/server/test_server.py

ASK = [{"role": "user", "content": "Write one sentence about the sea."}]


def test_a_request_keeps_what_it_set_and_takes_the_servers_for_the_rest():
    body = ChatRequest(messages=ASK)
    assert Defaults().sampling(body) == (1.0, 0, 1.0)  # the API's own
    assert Defaults(temperature=0.0, top_k=40).sampling(body) == (0.0, 40, 1.0)
    own = ChatRequest(messages=ASK, temperature=0.9, top_p=0.5)
    assert Defaults(temperature=0.0, top_k=40, top_p=0.95).sampling(own) == (0.9, 40, 0.5)
    told = ChatRequest(messages=ASK, temperature=1.0)  # the API's default, sent: it is the request's own
    assert Defaults(temperature=0.0).sampling(told) == (1.0, 0, 1.0)


@pytest.fixture(scope="module")
def server():
    s = Server("--ctx", "1024", "--threads", "2", "--parallel", "1", "--temp", "0", "--top-k", "40").wait_ready()
    yield s
    s.stop()


def test_the_start_line_and_props_show_the_sampling_defaults(server):
    assert "sampled with temperature 0.0, top_k 40" in server.line
    status, _, body = server.request("GET", "/props")
    params = json.loads(body)["default_generation_settings"]["params"]
    assert status == 200 and params["temperature"] == 0.0 and params["top_k"] == 40 and params["top_p"] == 1.0


def test_requests_without_sampling_fields_decode_greedily_on_every_route(server):
    client = openai.OpenAI(base_url=server.base + "/v1", api_key="x", max_retries=0, timeout=300)
    chats = {client.chat.completions.create(model="smol", messages=ASK, max_tokens=24, seed=s).choices[0].message.content
             for s in (1, 2, 3)}
    assert len(chats) == 1  # greedy: the seed no longer matters
    greedy = client.chat.completions.create(model="smol", messages=ASK, max_tokens=24, temperature=0).choices[0]
    assert chats == {greedy.message.content}
    said = {client.responses.create(model="smol", input=ASK, max_output_tokens=24).output_text for _ in range(2)}
    assert len(said) == 1
