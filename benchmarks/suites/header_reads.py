"""What reading a GGUF header from the hub costs: homespec's growing range reads over
huggingface_hub's HTTP client, side by side with huggingface_hub's HfFileSystem (its default
5 MiB blocks), both against the hub-shaped server of the test suite (tests/hub_server.py) on
127.0.0.1 serving the embedded SmolLM2 file. Prints JSON: requests and bytes each way.

    python -m benchmarks header_reads [--model FILE.gguf]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from benchmarks.harness import add_model, smollm2, use_tests
from benchmarks.results import Result

use_tests()


def _hits(hub) -> dict:
    return {"requests": len(hub.log), "bytes": hub.sent(),
            "calls": [f"{h.method} {h.path.split('?')[0]} {h.range or ''}".strip() for h in hub.log]}


def add_arguments(ap: argparse.ArgumentParser) -> None:
    add_model(ap, "the GGUF the hub serves (default: the embedded SmolLM2)")


def run(a: argparse.Namespace) -> Result:
    from hub_server import Hub, Repo, served

    model = Path(a.model) if a.model else smollm2()
    with served(Hub(repos={"org/model-GGUF": Repo({"model-Q4_1.gguf": model})})) as hub:
        os.environ.update(HF_ENDPOINT=hub.url, HF_HUB_CACHE=tempfile.mkdtemp(), HF_HUB_DISABLE_TELEMETRY="1")
        from huggingface_hub import HfFileSystem

        from homespec.formats.gguf import parse_gguf, read_gguf_header
        from homespec.sources.find import resolve_for_plan

        header = read_gguf_header(resolve_for_plan("org/model-GGUF:Q4_1"))
        ours = _hits(hub)
        hub.log.clear()
        with HfFileSystem(endpoint=hub.url).open("org/model-GGUF/model-Q4_1.gguf", "rb") as f:
            parse_gguf(f)
        theirs = _hits(hub)
    print(json.dumps({"file": model.name, "file_bytes": model.stat().st_size, "header_bytes": header.data_offset,
                      "homespec": ours, "hf_file_system": theirs}, indent=2))
    return Result(rows=[{"reader": "homespec", **ours}, {"reader": "hf_file_system", **theirs}],
                  ratios={"bytes_hf_over_homespec": round(theirs["bytes"] / ours["bytes"], 2) if ours["bytes"] else None},
                  detail={"file": model.name, "file_bytes": model.stat().st_size, "header_bytes": header.data_offset})
