"""What reading a GGUF header from the hub costs: homespec's growing range reads over
huggingface_hub's HTTP client, side by side with huggingface_hub's HfFileSystem (its default
5 MiB blocks), both against the hub-shaped server of the test suite (tests/hub_server.py) on
127.0.0.1 serving the embedded SmolLM2 file. Prints JSON: requests and bytes each way.

    PYTHONPATH=. python scripts/bench_header_reads.py [FILE.gguf]
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))


def _hits(hub) -> dict:
    return {"requests": len(hub.log), "bytes": hub.sent(),
            "calls": [f"{h.method} {h.path.split('?')[0]} {h.range or ''}".strip() for h in hub.log]}


def main() -> None:
    from hub_server import Hub, Repo, start

    from homespec.embedded import smollm2_path

    model = Path(sys.argv[1]) if len(sys.argv) > 1 else smollm2_path()
    hub = Hub(repos={"org/model-GGUF": Repo({"model-Q4_1.gguf": model})})
    httpd = start(hub)
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
    httpd.shutdown()
    print(json.dumps({"file": model.name, "file_bytes": model.stat().st_size, "header_bytes": header.data_offset,
                      "homespec": ours, "hf_file_system": theirs}, indent=2))


if __name__ == "__main__":
    main()
