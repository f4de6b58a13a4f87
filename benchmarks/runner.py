"""The one runner: `python -m benchmarks SUITE [ARGS...]` parses, runs the suite, writes its results file.

A Python suite (benchmarks/suites/<name>.py) defines `add_arguments(parser)` and `run(args) -> Result`; a
shell suite (<name>.sh) drives `homespec bench`, which writes its own JSON into the folder the runner names in
$OUT, and the runner gathers those files as the suite's rows.
"""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from benchmarks import harness, results
from benchmarks.results import Result
from homespec.errors import HomespecError

SUITES = Path(__file__).resolve().parent / "suites"


def suites() -> dict[str, Path]:
    """Suite name -> its file."""
    return {p.stem: p for p in sorted([*SUITES.glob("*.py"), *SUITES.glob("*.sh")]) if not p.stem.startswith("_")}


def _summary(path: Path) -> str:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".sh":
        lines = [ln[2:] for ln in text.splitlines()[1:] if ln.startswith("# ")]
    else:
        lines = text.split('"""', 2)[1].strip().split("\n\n")[0].splitlines() if text.startswith('"""') else []
    first = " ".join(" ".join(lines).split())
    return first if len(first) <= 100 else first[:97].rsplit(" ", 1)[0] + " ..."


def listing() -> str:
    found = suites()
    width = max(map(len, found))
    return "\n".join(f"  {name:<{width}}  {_summary(path)}" for name, path in found.items())


def _default_json(suite: str) -> Path:
    return harness.RUNS / f"{suite}-{datetime.now(timezone.utc):%Y%m%dT%H%M%S}.json"


def run_python(suite: str, argv: list[str]) -> tuple[Result, argparse.Namespace]:
    module = importlib.import_module(f"benchmarks.suites.{suite}")
    p = harness.parser(suite, module.__doc__)
    module.add_arguments(p)
    args = p.parse_args(argv)
    return module.run(args), args


def run_shell(suite: str, path: Path, argv: list[str]) -> tuple[Result, argparse.Namespace]:
    """A shell suite with its own flags: every argument goes to it but --json FILE and --no-json."""
    out_json, no_json, rest = None, False, []
    it = iter(argv)
    for a in it:
        if a == "--json":
            value = next(it, None)
            if value is None:
                harness.usage_error("--json needs a file", f"python -m benchmarks {suite} [ARGS] --json FILE")
            out_json = Path(value)
        elif a == "--no-json":
            no_json = True
        else:
            rest.append(a)
    out = Path(os.environ.get("OUT") or harness.ROOT / "runs" / f"bench-{suite}")
    rc = subprocess.call(["bash", str(path), *rest], env={**os.environ, "OUT": str(out)}, cwd=harness.ROOT)
    rows = [{"file": f.name, **results.load(f)} for f in sorted(out.glob("*.json"))] if out.is_dir() else []
    args = argparse.Namespace(json=out_json, no_json=no_json)
    return Result(rows=rows, detail={"out": str(out), "argv": rest}, status=rc), args


def main(argv: list[str]) -> int:
    found = suites()
    if not argv or argv[0] in ("-h", "--help", "--list"):
        print("usage: python -m benchmarks SUITE [ARGS...]   (SUITE --help for its flags)\n\nsuites:\n" + listing())
        return 0
    suite, rest = argv[0], argv[1:]
    if suite not in found:
        print(f"error: no suite {suite!r}\nhint: one of: {', '.join(found)}", file=sys.stderr)
        return 2
    path = found[suite]
    try:
        result, args = run_shell(suite, path, rest) if path.suffix == ".sh" else run_python(suite, rest)
    except HomespecError as e:  # what homespec itself would say: one line, the fix, its exit status
        print(f"error: {e.message}" + (f"\nhint: {e.hint}" if e.hint else ""), file=sys.stderr)
        return e.exit_code
    if not args.no_json:
        command = [Path(sys.executable).name, "-m", "benchmarks", *argv]
        doc = results.document(suite, command, harness.machine(), result)
        results.write(args.json or _default_json(suite), doc)
    return result.status
