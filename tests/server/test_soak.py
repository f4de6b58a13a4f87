"""A short soak of `homespec serve` (`python -m benchmarks soak_serve`, whose 5-minute run is in docs/server.md):
16 clients for 15 s mixing streamed, cancelled, malformed, tool-calling, schema-constrained, Anthropic
Messages and chained Responses requests against one real server. Afterwards: no request lost (each got an answer or an HTTP error),
every lane free and no live sequence, every forced call a call and every schema answer valid."""

from __future__ import annotations

import importlib

import pytest
from test_server import ROOT, Server  # the subprocess server of tests/server/test_server.py

pytestmark = pytest.mark.slow


def _soak_module():
    return importlib.import_module("benchmarks.suites.soak_serve")


def test_sixteen_clients_of_every_kind_lose_nothing():
    soak = _soak_module()
    server = Server("--ctx", "1024", "--threads", "2", "--parallel", "4", "--queue", "64",
                    "--chat-template-file", str(ROOT / "homespec" / "data" / "templates" / "chatml-tools.jinja"))
    try:
        server.wait_ready()
        # seed 6: the sixteen clients' first requests cover every kind asserted below
        out = soak.soak(server.base, clients=16, seconds=15, pid=server.proc.pid, seed=6)
    finally:
        assert server.stop() == 0
    kinds = out["by_kind"]
    assert out["lost"] == 0, out
    assert out["lanes_free"] and out["live_sequences"] == 0
    assert not out["failed_checks"], out["failed_checks"]
    assert {"stream", "cancel", "malformed", "tools", "schema", "anthropic", "responses"} <= set(kinds)
    assert kinds["malformed"].get("http-4xx", 0) >= 1 and out["ttft_p50_s"] is not None
    assert "request" in "".join(server.err) and "cancelled: the client left" in "".join(server.err)
