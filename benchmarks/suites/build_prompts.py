#!/usr/bin/env python3
"""Regenerate homespec/data/prompts/: train.jsonl.xz, {dev,test,long,edit,edit-dev}.jsonl and long_material.json.

    python scripts/build_prompts.py                 # the committed files (default seed)
    python scripts/build_prompts.py --seed 7 --out /tmp/p

The generator is tools/promptgen (a build-time tool, not part of the installed package). The same
seed always gives byte-identical files; tests/test_promptsets.py checks the committed files against a
fresh build.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from homespec.promptsets import DATA_DIR  # noqa: E402
from tools.promptgen.build import DEFAULT_SEED, write_all  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"generator seed (default {DEFAULT_SEED})")
    parser.add_argument("--out", type=Path, default=DATA_DIR, help="output folder (default: the packaged data)")
    args = parser.parse_args()
    for name, (count, size) in write_all(args.out, args.seed).items():
        prompts = "" if count is None else f"{count:6d} prompts"
        print(f"{name:18s} {prompts:14s} {size / 2**20:6.2f} MiB  {args.out / name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
