"""Render the GPU check's results (scripts/gpu_check.sh) as the Markdown of docs/gpu.md's results section.

Reads the folders given (the files each device call returned, or the docs/results/ folder
`gpu_check.sh collect` copied them to) and writes between `<!-- gpu-results:begin -->` and
`<!-- gpu-results:end -->` of `--doc FILE` (or prints):

* the machine (nvidia-smi's GPU name, driver, torch/CUDA, CPU) and whether this was a CPU dry run;
* **measured**: the 8B-shaped target's pass by tree size, the head's draft by depth, the host's step, the
  shipped head on SmolLM2 beside plain decoding and llama-server, each call's steps against the plan;
* **derived**: the speed-up an 8B user should expect on that GPU, tau x t(plain step) / t(speculative step),
  with the step times measured on the 8B-shaped files and tau the shipped head's recorded acceptance or a
  published head's reported one (PUBLISHED).

    python benchmarks/gpu/report.py docs/results/2026-12-10-h100 --doc docs/gpu.md
    python benchmarks/gpu/report.py --gpu-name DIR...      the short GPU name collect files the results under
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[2]
BEGIN, END = "<!-- gpu-results:begin -->", "<!-- gpu-results:end -->"
sys.path.insert(0, str(ROOT))  # run as a script: the results format lives in benchmarks/results.py

from benchmarks.results import payload  # noqa: E402

SHIPPED = ROOT / "homespec/data/heads/smollm2-135m-instruct/acceptance.json"
# Published tokens per target pass (tau) of Llama-3.1-8B heads, greedy (docs/gpu.md, "The 8B figures")
PUBLISHED = (
    ("EAGLE-3, Llama-3.1-8B (paper, Table 1, MT-bench, T=0)", 6.13),
    ("EAGLE-2, Llama-3.1-8B (EAGLE-3 paper, Table 1, MT-bench, T=0)", 4.05),
)
SHAPES = {"chain5": (4, 1, 5), "tree48": (6, 8, 48)}  # the host_step suite's shapes: depth, top-k, nodes


def load(folders: Sequence[Path], name: str) -> Any:
    for f in folders:
        p = f / name
        if p.is_file():
            return payload(json.loads(p.read_text()))  # a suite's results file: its detail beside its rows
    return None


def _rows(doc: dict | None) -> list[dict]:
    """A suite's rows; a file from before the benchmarks runner kept them under "rounds"."""
    return (doc or {}).get("rows") or (doc or {}).get("rounds") or []


def _f(x: float | None, fmt: str = "{:.2f}") -> str:
    return "—" if x is None else fmt.format(x)


def gpu_name(env: dict | None) -> str:
    if not env:
        return "unknown GPU"
    gpus = (env.get("nvidia_smi") or {}).get("gpus") or []
    return gpus[0]["name"] if gpus else (env.get("torch") or {}).get("device") or "no GPU"


def short_gpu(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'h100'; the results folder's suffix."""
    m = re.search(r"\b([A-Z]{1,3}\d{2,4}[A-Za-z]?)\b", name)
    return (m.group(1) if m else re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "gpu").lower()


def machine_lines(env: dict | None, summaries: list[dict]) -> list[str]:
    dry = any(s.get("dry_run") for s in summaries)
    if env is None:
        return ["Run: no env.json (call 1 did not return)."]
    gpus = (env.get("nvidia_smi") or {}).get("gpus") or [{}]
    g, t, host = gpus[0], env.get("torch") or {}, env.get("host") or {}
    line = (f"Run: **{gpu_name(env)}** (driver {g.get('driver_version', '—')}, {g.get('memory.total', '—')}); "
            f"torch {t.get('version', '—')}, CUDA {t.get('cuda_build', '—')}, Python {env.get('python')}; "
            f"host CPU {host.get('cpu_name', '—')}, {env.get('cpus', '—')} cores.")
    if dry:
        line = "**A dry run on the CPU: tiny shapes, no GPU; not results.** " + line
    return [line]


def curve_table(cost: dict | None) -> list[str]:
    if not cost:
        return ["**8B-shaped target, pass by tree size**: not measured (see the steps below)."]
    rows = {r["nodes"]: r for r in cost["curve"]}
    t1 = rows[min(rows)]["pass_ms"]["median"]
    lines = [f"**8B-shaped target (Llama-3.1-8B Q4_K_M, random weights), one verification pass by tree size** "
             f"(measured: `benchmarks/gpu/llama_cost.py`, {cost['context']}-token context, median of {cost['repeats']}; "
             f"flash attention {'on' if cost['device'].get('flash_attn') else 'off'}):", "",
             "| tree nodes T | depth | pass ms | inside llama_decode ms | T / T=1 |", "|---:|---:|---:|---:|---:|"]
    for n, r in sorted(rows.items()):
        lines.append(f"| {n} | {r['depth']} | {r['pass_ms']['median']:.3f} | {r['llama_decode_ms']['median']:.3f} | "
                     f"{r['pass_ms']['median'] / t1:.2f} |")
    return lines


def draft_table(cost: dict | None) -> list[str]:
    if not cost:
        return []
    lines = ["", f"**8B-shaped head (EAGLE-3 for Llama-3.1-8B, q8_0) in llama.cpp, one draft by depth** (measured: "
             f"`HeadDrafter.propose` after a step that committed {cost['accepted']} tokens):", "",
             "| depth | top-k | nodes | draft ms | inside the head's graph calls ms | head calls |", "|---:|---:|---:|---:|---:|---:|"]
    for d in cost["drafts"]:
        lines.append(f"| {d['depth']} | {d['topk']} | {d['total']} | {d['draft_ms']['median']:.3f} | "
                     f"{d['llama_process_ms']['median']:.3f} | {d['head_calls']:.0f} |")
    return lines


def host_rows(host: dict | None) -> dict[str, dict[str, float]]:
    """Per shape: the median over rounds of each figure the host_step suite printed."""
    out: dict[str, dict[str, float]] = {}
    for r in _rows(host):
        out.setdefault(r["shape"], {k: [] for k in ("step_ms", "decode_ms", "host_ms", "head_process_ms", "draft_ms")})
        for k in out[r["shape"]]:
            out[r["shape"]][k].append(r[k])
    return {s: {k: statistics.median(v) for k, v in d.items()} for s, d in out.items()}


def host_table(host: dict | None) -> list[str]:
    rows = host_rows(host)
    if not rows:
        return ["", "**8B-shaped host step**: not measured (see the steps below)."]
    lines = ["", f"**8B-shaped engine step** (measured: `python -m benchmarks host_step --drafter head`, {host['steps']} steps x "
             f"{len(_rows(host)) // max(1, len(rows))} rounds, medians; host = the step less llama_decode and the "
             "head's graph calls):", "",
             "| shape | step ms | llama_decode ms | head's graph calls ms | host ms | of which drafting |",
             "|---|---:|---:|---:|---:|---:|"]
    for shape, r in rows.items():
        lines.append(f"| {shape} | {r['step_ms']:.3f} | {r['decode_ms']:.3f} | {r['head_process_ms']:.3f} | "
                     f"{r['host_ms']:.3f} | {r['draft_ms']:.3f} |")
    return lines


def shipped_taus() -> dict[tuple[int, int, int], float]:
    doc = json.loads(SHIPPED.read_text())
    return {(s["depth"], s["topk"], s["total"]): s["tau"] for s in doc["shapes"]}


def predicted(host: dict | None) -> list[dict[str, Any]]:
    """Derived: tau x t(plain) / t(shape) for the shipped head's recorded taus and the published ones."""
    rows = host_rows(host)
    if "plain" not in rows:
        return []
    plain = rows["plain"]["step_ms"]
    taus = shipped_taus()
    cases = [(f"shipped head (SmolLM2), recorded at {'/'.join(map(str, SHAPES[s]))}", taus.get(SHAPES[s]), s)
             for s in ("chain5", "tree48")]
    cases += [(name, tau, "tree48") for name, tau in PUBLISHED]
    out = []
    for name, tau, shape in cases:
        if tau is None or shape not in rows:
            continue
        step = rows[shape]["step_ms"]
        out.append({"tau_source": name, "tau": tau, "shape": shape, "plain_ms": plain, "step_ms": step,
                    "plain_tokens_per_s": 1000 / plain, "tokens_per_s": 1000 * tau / step, "speedup": tau * plain / step})
    return out


def prediction_table(host: dict | None, gpu: str) -> list[str]:
    rows = predicted(host)
    if not rows:
        return []
    lines = ["", f"**What an 8B user should expect on this machine ({gpu})** (derived: tau x t(plain step) / t(speculative step), "
             "the step times measured above on the 8B-shaped files, tau from the source named; the published taus "
             "are the papers' trees, applied here to homespec's 48-node tree):", "",
             "| tau from | tau | shape | plain tok/s | speculative tok/s | speed-up |", "|---|---:|---|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['tau_source']} | {r['tau']:.2f} | {r['shape']} | {r['plain_tokens_per_s']:.1f} | "
                     f"{r['tokens_per_s']:.1f} | x{r['speedup']:.2f} |")
    return lines


def bench_table(bench: dict | None) -> list[str]:
    if not bench:
        return ["", "**SmolLM2-135M + the shipped head**: not measured (see the steps below)."]
    methods = bench.get("methods") or {r["method"]: r for r in _rows(bench)}
    none = (methods.get("homespec none") or {}).get("tokens_per_s")
    lines = ["", f"**SmolLM2-135M-Instruct Q4_1 + the shipped EAGLE-3.1 head** (measured: `python -m benchmarks llamacpp`, "
             f"{bench['prompts']} test prompts x {bench['max_tokens']} tokens, greedy, decode time):", "",
             "| method | tok/s | vs homespec none | tokens per target pass | = none's answers | = llama-server plain's |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, r in methods.items():
        if "error" in r:
            lines.append(f"| {name} | failed: {r['error'][:120]} | | | | |")
            continue
        ratio = r["tokens_per_s"] / none if none else None
        lines.append(f"| {name} | {r['tokens_per_s']:.1f} | {_f(ratio, 'x{:.2f}')} | {_f(r.get('tokens_per_pass'))} | "
                     f"{_f(r.get('identical_to_homespec_none'), '{:.0%}')} | {_f(r.get('identical_to_llama_server_plain'), '{:.0%}')} |")
    return lines


def junit_line(folders: Sequence[Path], name: str, title: str) -> list[str]:
    for f in folders:
        p = f / name
        if p.is_file():
            s = ET.parse(p).getroot()
            s = s if s.tag == "testsuite" else s.find("testsuite")
            a = s.attrib
            return [f"{title}: {a.get('tests')} tests, {a.get('failures')} failed, {a.get('errors')} errors, "
                    f"{a.get('skipped')} skipped (measured: `{name}`)."]
    return []


def steps_table(summaries: list[dict], plan: dict[str, dict[str, float]]) -> list[str]:
    lines = ["", "**Steps** (seconds measured on the machine; the plan's estimate beside, scripts/gpu_plan.py):", "",
             "| call | step | status | seconds | planned | note |", "|---:|---|---|---:|---:|---|"]
    for s in sorted(summaries, key=lambda d: d["part"]):
        for r in s["steps"]:
            est = plan.get(s.get("kind", ""), {}).get(r["step"])
            lines.append(f"| {s['part']} | {r['step']} | {r['status']} | {r['seconds']} | {_f(est, '{:.0f}')} | {r['note']} |")
    total = sum(s.get("seconds", 0) for s in summaries)
    lines += ["", f"The calls' own time: {total} s (the machine's start and the transfers come on top)."]
    return lines


def render(folders: Sequence[Path]) -> str:
    sys.path.insert(0, str(ROOT / "scripts"))
    from gpu_plan import STEPS

    env = load(folders, "env.json")
    summaries = [json.loads(p.read_text()) for f in folders for p in sorted(f.glob("summary-part*.json"))]
    cost, host, bench = load(folders, "cost-8b.json"), load(folders, "host-8b.json"), load(folders, "bench-smollm2.json")
    plan = {kind: {s.name: s.seconds for s in steps} for kind, steps in STEPS.items()}
    gpu = gpu_name(env)
    lines = machine_lines(env, summaries) + [""] + curve_table(cost) + draft_table(cost) + host_table(host)
    lines += prediction_table(host, gpu) + bench_table(bench) + [""]
    lines += junit_line(folders, "pytest-gpu.xml", "torch GPU tests (`pytest tests/gpu`, a process of their own)")
    lines += junit_line(folders, "pytest-smollm2.xml", "torch SmolLM2 GPU test")
    lines += steps_table(summaries, plan)
    return "\n".join(lines) + "\n"


def write_doc(doc: Path, body: str) -> None:
    text = doc.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"error: {doc} has no {BEGIN} ... {END} block\nhint: add the two markers where the results go")
    head, rest = text.split(BEGIN, 1)
    doc.write_text(head + BEGIN + "\n" + body + END + rest.split(END, 1)[1])


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--doc", type=Path, default=None, help="write the tables into this page's results block")
    ap.add_argument("--gpu-name", action="store_true", help="print the short GPU name (h100, h200) and stop")
    a = ap.parse_args(argv)
    if a.gpu_name:
        env = load(a.folders, "env.json")
        if env is None:
            return 1
        print(short_gpu(gpu_name(env)))
        return 0
    body = render(a.folders)
    if a.doc:
        write_doc(a.doc, body)
    else:
        sys.stdout.write(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
