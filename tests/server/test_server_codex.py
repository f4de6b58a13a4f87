"""Codex CLI (the npm package pinned in tests/codex/package.json) against a real `homespec serve`:
`codex exec "say hi"` over the Responses API with Codex's own instructions and tools (a namespace
tool, web_search), on the embedded SmolLM2 through the generic tool format: every request answered,
none refused, and a clean exit where the run ends within the bound.
Skipped, with the reason, where node or npm is missing or the npm registry cannot be reached.
`python -m benchmarks codex` times five runs (docs/server.md, "Clients")."""

from __future__ import annotations

import importlib

import pytest
from test_server import Server  # the subprocess server of tests/server/test_server.py

pytestmark = pytest.mark.slow


def _measure():
    return importlib.import_module("benchmarks.suites.codex")


def test_codex_exec_says_hi():
    measure = _measure()
    binary, why = measure.codex_binary()
    if binary is None:
        pytest.skip(why)
    server = Server("--ctx", "12288", "--parallel", "1", "--threads", "2", "--max-tokens", "32",
                    "--api-key", measure.KEY)

    def answered() -> list[str]:
        return [line for line in server.err if "POST /v1/responses:" in line and "answer tokens" in line]

    try:
        server.wait_ready()
        # the first answer is what is tested: Codex then has 30 s to end on its own (SmolLM2 may call its
        # tools turn after turn, each turn another ~9k-token prompt) before it is stopped
        run = measure.run_codex(binary, server.base + "/v1", measure.KEY, "say hi", timeout=600,
                                stop_when=lambda: bool(answered()), grace=30)
        served = len(server.err)  # what came before the stop (a turn Codex sent as it was stopped meets a 503)
    finally:
        server.stop()
    log = "".join(server.err)
    answers = answered()
    assert answers, (run, log[-3000:])  # Codex's ~9k-token request read and answered
    refused = [line for line in server.err[:served] if "-> 4" in line or "-> 5" in line]
    assert not refused, log[-3000:]  # none refused or failed while the server ran
    assert "tools left out: web_search" in log  # said once, not refused
    # a run that ended ended cleanly; one still going at the bound is SmolLM2 calling Codex's tools turn
    # after turn (each turn answered above), which is the model's choice, not the server's
    assert run["exit"] in (0, None), (run, log[-3000:])
