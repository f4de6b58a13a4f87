"""The GGUF run path never imports torch: `generate` with every method, `chat`, `bench` and `serve`
(several lanes, prompt reuse, --cache-ram, a grammar, log-probabilities, sampling) run in a
subprocess where `import torch` fails.

On a GPU machine the CUDA llama.cpp build and torch crash in one process, so "it caught the
ImportError and went on" is not good enough: the stand-in torch package records every attempt,
and a run that tried is a failure even when it recovered (docs/architecture.md, "Where each part
runs"). The EAGLE head still runs in torch until it runs inside llama.cpp: `--method eagle3`, and
`auto` on a model with a head, are expected to fail here (strict, so they flip once they pass).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROMPT = "List three colours, then list them again."

_SHIM = '''import os, traceback
with open(os.environ["HOMESPEC_TORCH_ATTEMPTS"], "a") as f:
    f.write("".join(traceback.format_stack()) + "\\n")
raise ImportError("torch cannot be imported here (tests/test_no_torch.py)")
'''


@pytest.fixture(scope="module")
def no_torch(tmp_path_factory) -> dict[str, str]:
    """The environment of a process where `import torch` fails and is recorded."""
    where = tmp_path_factory.mktemp("no_torch")
    (where / "torch").mkdir()
    (where / "torch" / "__init__.py").write_text(_SHIM)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(where), str(ROOT)]),
           "HOMESPEC_TORCH_ATTEMPTS": str(where / "attempts.txt"), "HOMESPEC_CHATS_DIR": str(where / "chats")}
    env.pop("HOMESPEC_API_KEY", None)
    return env


def _run(env: dict[str, str], *args: str, stdin: str = "", timeout: float = 300) -> subprocess.CompletedProcess:
    attempts = Path(env["HOMESPEC_TORCH_ATTEMPTS"])
    attempts.unlink(missing_ok=True)
    out = subprocess.run([sys.executable, "-m", "homespec", *args], input=stdin, capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=timeout)
    _no_attempt(attempts, out.stderr)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def _no_attempt(attempts: Path, stderr: str) -> None:
    if attempts.exists():
        pytest.fail(f"torch was imported:\n{attempts.read_text()[-4000:]}\nstderr: {stderr[-1500:]}")


@pytest.fixture(scope="module")
def smollm2() -> str:
    from homespec.embedded import smollm2_path

    return str(smollm2_path())


@pytest.fixture(scope="module")
def headless_gguf(tmp_path_factory) -> str:
    """A model without a shipped head: `auto` drafts with its lookups alone."""
    from tiny_models import make_tiny_gguf

    return str(make_tiny_gguf(tmp_path_factory.mktemp("tiny") / "tiny.gguf", n_layer=2, seed=1))


def _generate(env: dict[str, str], method: str, *extra: str) -> dict:
    out = _run(env, "generate", "-p", PROMPT, "-n", "24", "--ctx", "512", "--threads", "2", "--method", method,
               "--json", *extra)
    result = json.loads(out.stdout)
    assert result["token_ids"] and result["method"] == method, out.stdout[:500]
    return result


def test_generate_plain(no_torch):
    _generate(no_torch, "none")


@pytest.mark.slow
@pytest.mark.parametrize("method, extra", [
    ("ngram", ()),
    ("suffix", ("--temperature", "0.8", "--seed", "-7")),  # sampling, a negative seed
    ("draft", ("--draft", "SMOLLM2", "--no-guard")),
    ("auto", ()),  # the shipped head, in llama.cpp
    ("eagle3", ("--no-guard",)),
])
def test_generate_every_method(no_torch, smollm2, method, extra):
    _generate(no_torch, method, *[smollm2 if x == "SMOLLM2" else x for x in extra])


@pytest.mark.slow
def test_generate_auto_without_a_head(no_torch, headless_gguf):
    _generate(no_torch, "auto", "--model", headless_gguf, "--no-chat", "--no-guard")


@pytest.mark.slow
def test_a_chat_turn(no_torch):
    out = _run(no_torch, "chat", "--method", "ngram", "-n", "16", "--ctx", "512", "--threads", "2",
               stdin="Name a colour.\n/stats\n/quit\n")
    assert out.stdout.strip()


@pytest.mark.slow
def test_bench(no_torch):
    out = _run(no_torch, "bench", "--methods", "none,ngram,suffix", "--limit", "1", "-n", "8", "--ctx", "512",
               "--threads", "2", "--json")
    assert json.loads(out.stdout)


@pytest.mark.slow
def test_serve_several_lanes_with_reuse_grammar_logprobs_and_sampling(no_torch):
    attempts = Path(no_torch["HOMESPEC_TORCH_ATTEMPTS"])
    attempts.unlink(missing_ok=True)
    proc = subprocess.Popen([sys.executable, "-m", "homespec", "serve", "--port", "0", "--method", "suffix",
                             "--parallel", "2", "--ctx", "512", "--threads", "2", "--cache-ram", "64"],
                            cwd=ROOT, env=no_torch, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()  # printed once the model is loaded
        m = re.search(r"(http://127\.0\.0\.1:\d+)/v1", line)
        assert m, (line, proc.stderr.read() if proc.poll() is not None else "")
        base = m.group(1)
        history = [{"role": "user", "content": "Name two colours."}]
        first = _chat(base, {"messages": history, "max_tokens": 16})
        history += [first["choices"][0]["message"], {"role": "user", "content": "And one more?"}]
        again = _chat(base, {"messages": history, "max_tokens": 16})  # the conversation's prefix is reused
        assert again["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0) > 0, again["usage"]
        schema = {"type": "object", "properties": {"colour": {"type": "string"}}, "required": ["colour"]}
        shaped = _chat(base, {"messages": [{"role": "user", "content": "A colour as JSON."}], "max_tokens": 24,
                              "temperature": 0.7, "seed": -3, "logprobs": True, "top_logprobs": 2,
                              "response_format": {"type": "json_schema",
                                                  "json_schema": {"name": "c", "schema": schema}}})
        choice = shaped["choices"][0]
        assert choice["logprobs"]["content"]
        if choice["finish_reason"] == "stop":
            assert "colour" in json.loads(choice["message"]["content"])
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
    _no_attempt(attempts, proc.stderr.read())


def _chat(base: str, body: dict) -> dict:
    req = urllib.request.Request(f"{base}/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.time()
    with urllib.request.urlopen(req, timeout=300) as r:
        out = json.loads(r.read())
    assert time.time() - t0 < 300
    return out
