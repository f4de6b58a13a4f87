"""The GPU check's plan: what each device call carries and runs, and whether that fits (docs/gpu.md, "The plan").

    python scripts/gpu_plan.py check [--gguf FILE] [--carry DIR] [--json FILE]   the arithmetic alone
    python scripts/gpu_plan.py prepare --carry DIR --gguf FILE                    split the model into the calls' folders
    python scripts/gpu_plan.py env MANIFEST N                                      call N's settings, as shell assignments

A device call sends the source tree (git's tracked and untracked-not-ignored files) plus its carried folder,
64 MiB at most. What must travel besides the tree: llama-cpp-python's trimmed, patched source, a wheelhouse,
the embedded SmolLM2's tokenizer (call 1, for the 8B-shaped files) and the embedded SmolLM2 GGUF itself,
sliced over the calls. Everything that needs no real weights runs in call 1, so figures come back even if the
machine is lost before the model's last slice arrives.

The plan fails (exit 1, one `error:` line per problem) when a call would carry more than 64 MiB, when more
calls than MAX_CALLS are needed, when the expected device time passes BUDGET_S, or when every call running
to its timeout would pass TASK_S. Device time is estimated per step: each step's seconds as the newest GPU
run under docs/results/ recorded them (its summary-partN.json), else the estimate in STEPS with its source.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parent.parent
MIB = 1 << 20
LIMIT = 64 * MIB  # what one device call may carry: the tree and its carried folder
MARGIN = 3 * MIB // 2  # room for files the tree gains before the calls (notes, results)
# Two calls cannot carry the embedded model: the shipped head (18.8 MiB) travels with the tree in every
# call, so two calls leave at most 2 x (64 - 18.8) = 90.4 MiB for a 93.8 MiB model (86.2 MiB as .xz)
# and the llama.cpp source (docs/gpu.md, "Why three calls").
MAX_CALLS = 3
BUDGET_S = 540  # the whole check: at most 9 device minutes, the machine's start included
TASK_S = 900  # a task's device time: every call running to its timeout must still end inside it
PROCEDURE = 2  # summary-partN.json files of this procedure feed the estimates (the 2026-12-04 run was 1)
START_S = (120, "the machine's start: 1-2 minutes (the device tool's notes); the longer end")
CALL_S = (10, "one call's transfer and start: 6-9 s between calls of ~62 MiB in the 2026-12-04 H200 run "
              "(its part logs' timestamps)")


@dataclass(frozen=True)
class Step:
    name: str
    seconds: float
    source: str
    overlaps: str | None = None  # runs while this background step runs: adds nothing to the call's time
    optional: bool = False  # only when the call's deadline leaves time; not counted in the plan


# What each call runs, in order, with its estimate and where the number comes from.
STEPS: dict[str, tuple[Step, ...]] = {
    "first": (
        Step("store", 1, "sha256 and copy of a 30 MiB slice"),
        Step("env", 11, "measured: 11 s in the 2026-12-04 H200 run"),
        Step("build-start", 10, "estimate: unpacking the source and cmake's configure with CUDA"),
        Step("compile", 265, "measured: the CUDA build took 24 s before its pause and 224 s after (2026-12-04 H200 "
             "run, 16 cores, sm_90), plus llama-server's own objects: ~15 s (this CPU's ninja log, 16 jobs)"),
        Step("models", 20, "estimate: 4.9 GB written as repeated blocks at disk speed", overlaps="compile"),
        Step("tests-torch", 48, "measured: pytest tests/gpu took 48 s in the 2026-12-04 H200 run", overlaps="compile"),
        Step("build", 0, "the wait for the compile: counted in the compile's estimate", overlaps="compile"),
        Step("site", 2, "estimate: copying the built libraries"),
        Step("cost-8b", 25, "estimate: 4.9 GB to the GPU (page cache), then ~500 passes and drafts of 5-40 ms"),
        Step("host-8b", 20, "estimate: the model loaded again, 3 shapes x 2 rounds x 48 steps of 10-40 ms"),
    ),
    "middle": (Step("store", 1, "sha256 and copy of a 37 MiB slice"),),
    "last": (
        Step("store", 1, "sha256 and copy of a 37 MiB slice"),
        Step("join", 1, "sha256 of the joined 94 MiB file"),
        Step("smoke", 5, "measured: 5 s for the smoke test in the 2026-12-04 H200 run"),
        Step("convert", 3, "estimate: the shipped head to an eagle3 GGUF (numpy, 20 MB)"),
        Step("bench-smollm2", 40, "estimate: 6 methods x 8 prompts x 128 tokens at 300-400 tokens/s, "
             "plus a model load or server start each"),
        Step("tests-smollm2", 11, "measured: 11 s in the 2026-12-04 H200 run", optional=True),
    ),
}
TIMEOUTS = {"first": 420, "middle": 60, "last": 180}  # timeout_s of each kind of call


@dataclass
class Call:
    n: int
    kind: str  # first, middle, last
    carry: dict[str, int] = field(default_factory=dict)  # what travels besides the tree: name -> bytes
    slice_bytes: int = 0  # bytes of the embedded model in this call
    timeout_s: int = 0
    seconds: float = 0.0  # expected: transfer + steps (overlapping ones excluded)

    def bytes_with(self, tree: int) -> int:
        return tree + sum(self.carry.values()) + self.slice_bytes


@dataclass
class Plan:
    tree_bytes: int
    gguf_bytes: int
    fixed: dict[str, int]
    calls: list[Call]
    steps: dict[str, list[dict]]
    device_s: float
    worst_s: float
    problems: list[str]
    two_calls: str  # the arithmetic of the two-call target

    def to_json(self) -> dict:
        return asdict(self)


def tree_bytes(root: Path = ROOT) -> int:
    """What a device call sends besides its carry: tracked and untracked-not-ignored files."""
    out = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=root, capture_output=True, check=True)
    total = 0
    for name in out.stdout.decode().split("\0"):
        p = root / name
        if name and p.is_file() and not p.is_symlink():
            total += p.stat().st_size
    return total


def measured_steps(results: Path = ROOT / "docs" / "results") -> tuple[dict[tuple[str, str], float], str | None]:
    """{(call kind, step): seconds} from the newest GPU run of this procedure under docs/results/."""
    runs = sorted((p for p in results.glob("*/summary-part1.json")), key=lambda p: p.parent.name)
    for first in reversed(runs):
        doc = json.loads(first.read_text())
        if doc.get("procedure") != PROCEDURE or doc.get("dry_run"):
            continue
        out = {}
        for part in first.parent.glob("summary-part*.json"):
            d = json.loads(part.read_text())
            for s in d.get("steps", []):
                if s.get("status") == "ok":
                    out[(d.get("kind", ""), s["step"])] = float(s["seconds"])
        return out, first.parent.name
    return {}, None


def call_steps(kind: str, measured: dict[tuple[str, str], float], run: str | None) -> list[Step]:
    steps = []
    for s in STEPS[kind]:
        got = measured.get((kind, s.name))
        steps.append(s if got is None else Step(s.name, got, f"measured in docs/results/{run}/", s.overlaps, s.optional))
    return steps


def call_seconds(steps: Sequence[Step]) -> float:
    """A call's expected time: its transfer and its steps, less what runs beside a background step."""
    total = CALL_S[0] + sum(s.seconds for s in steps if not s.optional and s.overlaps is None)
    for bg in {s.overlaps for s in steps if s.overlaps}:
        beside = sum(s.seconds for s in steps if s.overlaps == bg)
        main = next(s.seconds for s in steps if s.name == bg)
        total += max(0.0, beside - main)  # a foreground step longer than the build it overlaps
    return total


def allocate(tree: int, gguf: int, fixed: dict[str, int]) -> tuple[list[Call], list[str]]:
    """The fewest calls that carry `fixed` (call 1) and the model, each call filled to the limit."""
    room = LIMIT - MARGIN - tree
    first = room - sum(fixed.values())
    problems = []
    if first <= 0:
        return [], [f"the tree ({tree / MIB:.1f} MiB) and call 1's files ({sum(fixed.values()) / MIB:.1f} MiB) "
                    f"leave no room in a 64 MiB call"]
    n = 1 if gguf <= first else 1 + math.ceil((gguf - first) / room)
    calls, left = [], gguf
    for i in range(1, n + 1):
        kind = "first" if i == 1 else ("last" if i == n else "middle")
        take = min(left, first if i == 1 else room)
        calls.append(Call(i, kind, dict(fixed) if i == 1 else {}, take))
        left -= take
    if n == 1:
        calls[0].kind = "first"
        problems.append("the whole model fits call 1: the plan expects at least two calls (see STEPS)")
    if n > MAX_CALLS:
        problems.append(f"{n} calls are needed, more than {MAX_CALLS}: the tree is {tree / MIB:.1f} MiB "
                        f"(each call leaves {room / MIB:.1f} MiB of its 64)")
    return calls, problems


def two_call_arithmetic(tree: int, gguf: int, fixed: dict[str, int]) -> str:
    need = gguf + sum(fixed.values())
    have = 2 * (LIMIT - MARGIN - tree)
    return (f"two calls carry 2 x (64 - {tree / MIB:.2f} tree - {MARGIN / MIB:.1f} margin) = {have / MIB:.1f} MiB; "
            f"the model and call 1's files need {need / MIB:.1f} MiB"
            + ("" if need > have else ": two calls would do"))


def make_plan(tree: int, gguf: int, fixed: dict[str, int], results: Path = ROOT / "docs" / "results") -> Plan:
    calls, problems = allocate(tree, gguf, fixed)
    measured, run = measured_steps(results)
    steps = {kind: [asdict(s) for s in call_steps(kind, measured, run)] for kind in STEPS}
    for c in calls:
        c.timeout_s = TIMEOUTS[c.kind]
        c.seconds = call_seconds(call_steps(c.kind, measured, run))
        if c.bytes_with(tree) > LIMIT:
            problems.append(f"call {c.n} would carry {c.bytes_with(tree) / MIB:.1f} MiB, over 64")
    device = START_S[0] + sum(c.seconds for c in calls)
    worst = START_S[0] + sum(CALL_S[0] + c.timeout_s for c in calls)
    if device > BUDGET_S:
        problems.append(f"the plan expects {device:.0f} device seconds, over the budget of {BUDGET_S}")
    if worst > TASK_S:
        problems.append(f"every call running to its timeout would take {worst:.0f} device seconds, over {TASK_S}")
    return Plan(tree, gguf, fixed, calls, steps, device, worst, problems, two_call_arithmetic(tree, gguf, fixed))


# --- the carried folders ------------------------------------------------------------------------


def folder_bytes(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else p.stat().st_size


def sha256(path: Path, start: int = 0, length: int | None = None) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        f.seek(start)
        left = length if length is not None else 1 << 62
        while left > 0:
            block = f.read(min(left, 1 << 22))
            if not block:
                break
            h.update(block)
            left -= len(block)
    return h.hexdigest()


def write_calls(plan: Plan, carry: Path, gguf: Path, stage: Path) -> dict:
    """Each call's folder carry/callN: its slice of the model, call 1 the staged files, every one the manifest."""
    slices, off = [], 0
    for c in plan.calls:
        d = carry / f"call{c.n}"
        d.mkdir(parents=True, exist_ok=True)
        with open(gguf, "rb") as src, open(d / f"gguf.part{c.n}", "wb") as dst:
            src.seek(off)
            left = c.slice_bytes
            while left:
                block = src.read(min(left, 1 << 22))
                dst.write(block)
                left -= len(block)
        slices.append({"call": c.n, "bytes": c.slice_bytes, "sha256": sha256(d / f"gguf.part{c.n}")})
        off += c.slice_bytes
    for name in plan.fixed:
        shutil.move(str(stage / name), str(carry / "call1" / name))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    manifest = {"procedure": PROCEDURE, "calls": len(plan.calls), "gguf_name": gguf.name, "gguf_bytes": plan.gguf_bytes,
                "gguf_sha256": sha256(gguf), "slices": slices, "commit": commit,
                "kinds": {str(c.n): c.kind for c in plan.calls}, "timeouts": {str(c.n): c.timeout_s for c in plan.calls},
                "steps": plan.steps, "device_s": round(plan.device_s), "budget_s": BUDGET_S}
    for c in plan.calls:
        (carry / f"call{c.n}" / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def print_plan(plan: Plan, out=sys.stdout) -> None:
    print(f"tree {plan.tree_bytes / MIB:.2f} MiB; the model {plan.gguf_bytes / MIB:.1f} MiB; call 1's files "
          + ", ".join(f"{k} {v / MIB:.1f} MiB" for k, v in plan.fixed.items()), file=out)
    print(f"not two calls: {plan.two_calls}", file=out)
    print(f"Device calls, back to back (the machine keeps /tmp only while warm, ~30 s idle); expected "
          f"{plan.device_s:.0f} device seconds with the start (budget {BUDGET_S}), at most {plan.worst_s:.0f} "
          f"if every call runs to its timeout:", file=out)
    for c in plan.calls:
        print(f'  {c.n}. run(command="bash scripts/gpu_check.sh part {c.n}", carry=[".gpu-carry/call{c.n}"], '
              f'timeout_s={c.timeout_s})   # {c.bytes_with(plan.tree_bytes) / MIB:.1f} MiB, ~{c.seconds:.0f} s', file=out)
    for p in plan.problems:
        print(f"error: {p}", file=sys.stderr)


def shell_env(manifest: Path, n: int) -> str:
    """Call n's settings as shell assignments (gpu_check.sh evals them)."""
    m = json.loads(manifest.read_text())
    kind = m["kinds"][str(n)]
    lines = [f"calls={m['calls']}", f"kind={kind}", f"gguf_name={m['gguf_name']}", f"gguf_sha256={m['gguf_sha256']}",
             f"timeout_s={m['timeouts'][str(n)]}", f"slice_sha256={m['slices'][n - 1]['sha256']}"]
    lines += [f"est_{s['name'].replace('-', '_')}={int(math.ceil(s['seconds']))}" for s in m["steps"][kind]]
    return "\n".join(lines) + "\n"


def fixed_sizes(stage: Path | None) -> dict[str, int]:
    """Call 1's files: as staged by prepare, else the sizes the last prepare made (docs/gpu.md)."""
    names = {"llama-src.tar.xz": 3_157_028, "wheels": 2_500_000, "vocab.gguf": 1_768_643}
    if stage is None:
        return names
    return {name: folder_bytes(stage / name) for name in names if (stage / name).exists()}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check")
    c.add_argument("--gguf", type=Path, default=None, help="the model to carry (default: the embedded SmolLM2)")
    c.add_argument("--stage", type=Path, default=None, help="call 1's staged files (default: recorded sizes)")
    c.add_argument("--json", type=Path, default=None)
    p = sub.add_parser("prepare")
    p.add_argument("--carry", type=Path, required=True)
    p.add_argument("--gguf", type=Path, required=True)
    e = sub.add_parser("env")
    e.add_argument("manifest", type=Path)
    e.add_argument("n", type=int)
    a = ap.parse_args(argv)
    if a.cmd == "env":
        sys.stdout.write(shell_env(a.manifest, a.n))
        return 0
    if a.cmd == "check":
        gguf = a.gguf or _embedded()
        plan = make_plan(tree_bytes(), gguf.stat().st_size, fixed_sizes(a.stage))
        if a.json:
            a.json.write_text(json.dumps(plan.to_json(), indent=1) + "\n")
    else:
        stage = a.carry / "stage"
        plan = make_plan(tree_bytes(), a.gguf.stat().st_size, fixed_sizes(stage))
        if not plan.problems:
            write_calls(plan, a.carry, a.gguf, stage)
            shutil.rmtree(stage)
    print_plan(plan)
    return 1 if plan.problems else 0


def _embedded() -> Path:
    sys.path.insert(0, str(ROOT))
    from homespec.embedded import smollm2_path

    return Path(smollm2_path())


if __name__ == "__main__":
    sys.exit(main())
