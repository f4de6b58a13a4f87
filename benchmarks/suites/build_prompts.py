"""Regenerate homespec/data/prompts/: train.jsonl.xz, {dev,test,long,edit,edit-dev}.jsonl and long_material.json.

    python -m benchmarks build_prompts --no-json                 # the committed files (default seed)
    python -m benchmarks build_prompts --seed 7 --out /tmp/p

The generator is tools/promptgen (a build-time tool, not part of the installed package). The same
seed always gives byte-identical files; tests/test_promptsets.py checks the committed files against a
fresh build.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.results import Result
from homespec.promptsets import DATA_DIR
from tools.promptgen.build import DEFAULT_SEED, write_all


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"generator seed (default {DEFAULT_SEED})")
    parser.add_argument("--out", type=Path, default=DATA_DIR, help="output folder (default: the packaged data)")


def run(args: argparse.Namespace) -> Result:
    rows = []
    for name, (count, size) in write_all(args.out, args.seed).items():
        prompts = "" if count is None else f"{count:6d} prompts"
        print(f"{name:18s} {prompts:14s} {size / 2**20:6.2f} MiB  {args.out / name}", file=sys.stderr)
        rows.append({"file": name, "prompts": count, "bytes": size})
    return Result(rows=rows, detail={"seed": args.seed, "out": str(args.out)})

