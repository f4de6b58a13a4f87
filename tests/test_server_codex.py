"""Codex CLI (the npm package pinned in tests/codex/package.json) against a real `homespec serve`:
`codex exec "say hi"` over the Responses API with Codex's own instructions and tools (a namespace
tool, web_search), on the embedded SmolLM2 through the generic tool format, to a clean exit.
Skipped, with the reason, where node or npm is missing or the npm registry cannot be reached.
scripts/measure_codex.py times five runs (docs/server.md, "Clients")."""

from __future__ import annotations

import importlib.util

import pytest
from test_server import ROOT, Server  # the subprocess server of tests/test_server.py

pytestmark = pytest.mark.slow


def _measure():
    spec = importlib.util.spec_from_file_location("measure_codex", ROOT / "scripts" / "measure_codex.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_codex_exec_says_hi():
    measure = _measure()
    binary, why = measure.codex_binary()
    if binary is None:
        pytest.skip(why)
    server = Server("--ctx", "12288", "--parallel", "1", "--threads", "2", "--max-tokens", "256",
                    "--api-key", measure.KEY)
    try:
        server.wait_ready()
        run = measure.run_codex(binary, server.base + "/v1", measure.KEY, "say hi", timeout=900)
    finally:
        server.stop()
    assert run["exit"] == 0, (run, "".join(server.err)[-3000:])
    assert not any("-> 4" in line or "-> 5" in line for line in server.err)  # no request refused or failed
    assert any("tools left out: web_search" in line for line in server.err)  # said once, not refused
