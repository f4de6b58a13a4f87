"""Write the flags ggml-rpc-server accepts, read from a llama.cpp source tree, to stdout.

    python scripts/rpc_server_flags.py LLAMA_CPP_DIR [VERSION] > tests/data/rpc_server_flags.txt

LLAMA_CPP_DIR is the llama.cpp that llama-cpp-python vendors (see scripts/llama_server_flags.py for how to
get it). The server parses its arguments by hand in tools/rpc/rpc-server.cpp (`arg == "-p" || arg ==
"--port"`); tests/plan/test_plan_emit.py checks every flag `homespec plan --emit llama-server` prints for another
machine against the file this writes.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path


def rpc_server_flags(llama_cpp: Path) -> list[str]:
    src = (llama_cpp / "tools" / "rpc" / "rpc-server.cpp").read_text()
    return sorted(set(re.findall(r'arg == "(-[-\w]+)"', src)))


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    version = argv[2] if len(argv) > 2 else "?"
    print(f"# Flags ggml-rpc-server accepts: llama.cpp vendored in llama-cpp-python {version}")
    print("# (vendor/llama.cpp/tools/rpc/rpc-server.cpp). Made by: python scripts/rpc_server_flags.py <llama.cpp dir> "
          f"{version}")
    print("\n".join(rpc_server_flags(Path(argv[1]))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
