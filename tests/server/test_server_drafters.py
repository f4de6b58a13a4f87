"""`homespec serve` with the default method (auto): /metrics says, per drafter, what was drafted and
accepted, and the per-drafter counts add up to the totals; the official client gets plain
decoding's answer."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

openai = pytest.importorskip("openai")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
EDIT = ("Fix the typos in this and return it in full:\n\nThe meeting has been moved too Thursday at 3 becuase "
        "half the team is off on Wednesday. Please bring the the report and the budget figures.")


def _serve(*args: str) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "homespec", "serve", "--port", "0", "--ctx", "512", "--threads", "2",
                             *args], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    m = re.search(r"(http://127\.0\.0\.1:\d+)/v1", proc.stdout.readline())
    assert m, "serve did not start"
    return proc, m.group(1)


def _metrics(base: str) -> dict[tuple[str, str], float]:
    import urllib.request

    with urllib.request.urlopen(base + "/metrics", timeout=30) as r:
        text = r.read().decode()
    return {(s.name, s.labels.get("drafter", "")): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


@pytest.fixture(scope="module")
def servers():
    auto, auto_base = _serve("--parallel", "2", "--no-guard")  # every lookup that finds a chain is verified
    plain, plain_base = _serve("--parallel", "1", "--method", "none")
    yield auto_base, plain_base
    for p in (auto, plain):
        p.terminate()
        p.wait(60)


def test_metrics_count_per_drafter_and_the_answer_is_plains(servers):
    auto_base, plain_base = servers
    answers = []
    for base in servers:
        client = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0, timeout=300)
        r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": EDIT}], max_tokens=48,
                                           temperature=0)
        answers.append(r.choices[0].message.content)
    assert answers[0] == answers[1]
    m = _metrics(auto_base)
    by = {d: m[("homespec:spec_decode_num_accepted_tokens_by_drafter_total", d)]
          for (name, d) in m if name == "homespec:spec_decode_num_accepted_tokens_by_drafter_total"}
    assert set(by) & {"ngram", "suffix"} and set(by) <= {"ngram", "suffix", "eagle3"}
    for kind in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
        total = m[(f"homespec:spec_decode_{kind}_total", "")]
        assert sum(v for (name, _), v in m.items() if name == f"homespec:spec_decode_{kind}_by_drafter_total") == total
