"""The official openai npm client (tests/node/client.mjs) against a real `homespec serve`: plain and
streamed chat, a forced tool call, structured output, logprobs. Skipped, with the reason, where
node or npm is missing or the npm registry cannot be reached to install the client."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from test_server import ROOT, Server  # the subprocess server of tests/server/test_server.py

pytestmark = pytest.mark.slow
NODE_DIR = ROOT / "tests" / "node"


@pytest.fixture(scope="module")
def node_client():
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are not installed")
    if not (NODE_DIR / "node_modules" / "openai").is_dir():
        done = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--silent"], cwd=NODE_DIR,
                              capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            pytest.skip(f"npm could not install the openai client: {done.stderr.strip()[-300:]}")
    return NODE_DIR / "client.mjs"


def test_the_npm_client_speaks_to_the_server(node_client):
    server = Server("--method", "none", "--ctx", "1024", "--threads", "2", "--parallel", "1",
                    "--chat-template-file", str(ROOT / "homespec" / "data" / "templates" / "chatml-tools.jinja"))
    try:
        server.wait_ready()
        done = subprocess.run(["node", str(node_client), server.base + "/v1"], capture_output=True, text=True,
                              timeout=300)
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["text"] and found["streamed"] == found["text"] and found["usage"]["completion_tokens"] == 8
    assert found["call"]["name"] == "get_weather" and "city" in json.loads(found["call"]["arguments"])
    assert found["finish"] == "tool_calls"
    assert set(found["structured"]) == {"name", "age"} and found["logprobs"] == 4
