"""Run a script or a module in a process where `import torch` fails.

    python benchmarks/gpu/notorch.py SCRIPT.py [ARGS...]
    python benchmarks/gpu/notorch.py -m MODULE [ARGS...]
    python benchmarks/gpu/notorch.py - < CODE.py

The GPU check runs every llama.cpp step this way: a CUDA build of llama.cpp and the GPU machine's CUDA
torch crash in one process (docs/gpu.md, "What the first run found"), and homespec's GGUF path never
needs torch. An accidental import then fails with an ImportError that names it, instead of a segfault.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path


def main(argv: list[str]) -> None:
    if not argv or (argv[0] == "-m" and len(argv) < 2):
        sys.exit("error: nothing to run\nhint: notorch.py SCRIPT.py [ARGS] or notorch.py -m MODULE [ARGS]")
    sys.modules["torch"] = None  # type: ignore[assignment]  # `import torch` raises ImportError from here on
    if argv[0] == "-":
        sys.argv = ["-"]
        exec(compile(sys.stdin.read(), "<stdin>", "exec"), {"__name__": "__main__"})
    elif argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(argv)
        sys.path.insert(0, str(Path(argv[0]).resolve().parent))  # as `python SCRIPT` would
        runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
