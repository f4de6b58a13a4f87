"""Render the GPU check's results (scripts/gpu_check.sh) as the Markdown tables of docs/gpu.md.

Reads every results folder given (the files each device call returned, or the docs/results/
folder `gpu_check.sh collect` copied them to) and writes the tables between the markers
`<!-- gpu-results:begin -->` and `<!-- gpu-results:end -->` of `--doc FILE` (or prints them),
each GPU figure beside this project's CPU figure for the same thing:

* the torch-backend bench (tokens/s, speed-up, tokens per target pass, identical fraction);
* verification-cost ratios T=8/T=1 and T=32/T=1 (T-node tree pass over a one-token pass);
* the speed-up predicted from the 8B-shaped costs and the shipped head's acceptance, beside
  `homespec plan`'s estimate;
* the GGUF-backend bench, when the CUDA build of llama-cpp-python made it;
* which steps of which call failed or were skipped.

    python scripts/gpu_report.py docs/results/2026-12-02-h200 --doc docs/gpu.md
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- gpu-results:begin -->", "<!-- gpu-results:end -->"
# This project's CPU figures (2-core x86, no GPU; docs/results/README.md says how each was made)
CPU_TORCH_BENCH = ROOT / "docs/results/2026-12-01/head8-100-torch-tree.json"
CPU_GGUF_BENCH = ROOT / "docs/results/2026-12-01/head8-100-gguf-tree.json"
CPU_TORCH_CURVE = ROOT / "docs/results/2026-12-01/cost-curve-cpu-smollm2.json"
# llama.cpp on this CPU, 2 threads, quiet: a batch of 1/2/4/8/16 tokens (docs/backends.md, "Measurements")
CPU_LLAMACPP_BATCH_MS = {1: 6.7, 2: 13.0, 4: 18.8, 8: 32.9, 16: 56.5}


def _load(folders: Sequence[Path], name: str) -> dict | None:
    for f in folders:
        p = f / name
        if p.is_file():
            return json.loads(p.read_text())
    return None


def _f(x: float | None, fmt: str = "{:.2f}") -> str:
    return "—" if x is None else fmt.format(x)


def bench_table(guard: dict | None, noguard: dict | None, cpu_path: Path, title: str) -> list[str]:
    """One row per method and guard setting, with this CPU's figures for the same method."""
    if guard is None and noguard is None:
        return [f"**{title}**: not measured (see the step status below)."]
    first = guard or noguard
    lines = [f"**{title}** ({first['n_prompts']} test prompts x {first['max_tokens']} tokens, greedy; "
             f"{first['machine'].get('torch', '')} / llama_cpp {first['machine'].get('llama_cpp', '—')}):", "",
             "| method | guard | tok/s | speed-up | tokens per target pass | spec tau | identical | CPU tok/s | CPU speed-up |",
             "|---|---|---|---|---|---|---|---|---|"]
    cpu = json.loads(cpu_path.read_text()) if cpu_path.is_file() else None
    cpu_m = (cpu or {}).get("methods", {})
    for label, run in (("on", guard), ("off", noguard)):
        if run is None:
            continue
        for name, m in run["methods"].items():
            c = cpu_m.get(name, {})
            lines.append(f"| {name} | {label} | {_f(m['tokens_per_s'], '{:.1f}')} | {_f(m['speedup'], 'x{:.2f}')} | "
                         f"{_f(m['mean_accepted'])} | {_f(m.get('spec_tau'))} | {_f(m.get('identical_fraction'))} | "
                         f"{_f(c.get('tokens_per_s'), '{:.1f}')} | {_f(c.get('speedup'), 'x{:.2f}')} |")
    if cpu:
        lines += ["", f"CPU columns: `{cpu_path.relative_to(ROOT)}` ({cpu['n_prompts']} prompts x {cpu['max_tokens']} "
                  "tokens, this 2-core CPU, guard off, tree 6/8/48)."]
    return lines


def _ratio(curve: dict | None, t: int) -> float | None:
    if not curve:
        return None
    rows = {r["nodes"]: r["verify_ms"]["median"] for r in curve["curve"]}
    return rows[t] / rows[1] if t in rows and 1 in rows else None


def _t1(curve: dict | None) -> float | None:
    if not curve:
        return None
    return next((r["verify_ms"]["median"] for r in curve["curve"] if r["nodes"] == 1), None)


def cost_table(c8b: dict | None, csmol: dict | None, ccpu: dict | None) -> list[str]:
    lines = ["**Verification cost** (a T-node tree pass over a one-token pass, after the committed context; "
             "`scripts/gpu_cost_curve.py`):", "",
             "| model | where | T=1 ms | T=8/T=1 | T=32/T=1 | T=64/T=1 |", "|---|---|---|---|---|---|"]
    for c in (c8b, csmol, ccpu):
        if c is None:
            continue
        where = f"{c['device']}, {c['dtype']}, context {c['context']}" + (" (tiny shape: a code-path check)" if c["tiny"] else "")
        lines.append(f"| {c['shape']['name']} | {where} | {_f(_t1(c), '{:.3f}')} | {_f(_ratio(c, 8))} | "
                     f"{_f(_ratio(c, 32))} | {_f(_ratio(c, 64))} |")
    b = CPU_LLAMACPP_BATCH_MS
    lines.append(f"| SmolLM2-135M Q4_1, llama.cpp | this CPU, 2 threads (docs/backends.md) | {b[1]} | {b[8] / b[1]:.2f} | "
                 f"— (T=16: {b[16] / b[1]:.2f}) | — |")
    if c8b is None:
        lines += ["", "The 8B-shaped curve was not measured (see the step status below)."]
    return lines


def prediction_table(c8b: dict | None) -> list[str]:
    if c8b is None:
        return []
    plan = c8b["planner"]
    d = plan["default"]
    by_shape = {(p["depth"], p["topk"], p["total"]): p for p in plan["at_recorded_shapes"]}
    lines = [f"**Predicted speed-up of an 8B target with a head that accepts like the shipped one** "
             f"({c8b['shape']['name']}, {c8b['device']}; measured costs in the planner's speed model, "
             "tau / (verify + draft) over 1 / plain):", "",
             "| draft shape | tau (recorded) | verify / plain | draft ms | predicted speed-up | planner, same shape and tau |",
             "|---|---|---|---|---|---|"]
    for p in c8b["predicted"]:
        est = by_shape.get((p["depth"], p["topk"], p["total"]), {})
        lines.append(f"| depth {p['depth']}, top-{p['topk']}, {p['total']} nodes | {p['tau']:.2f} | {p['verify_ratio']:.2f} | "
                     f"{p['draft_ms']:.2f} | x{p['speedup']:.2f} | {_f(est.get('speedup'), 'x{:.2f}')} |")
    lines += ["", f"`{plan['command']}` (its default draft, {d['tree_tokens']} nodes, tau {d['expected_tau']}): "
              f"x{_f(d['speedup'])}, plain {_f(d['plain_ms'], '{:.2f}')} ms, verify {_f(d['verify_ms'], '{:.2f}')} ms, "
              f"draft {_f(d['draft_ms'], '{:.2f}')} ms; measured plain {c8b['predicted'][0]['plain_ms']:.2f} ms."]
    return lines


def status_lines(folders: Sequence[Path]) -> list[str]:
    rows = []
    for f in folders:
        for p in sorted(f.glob("summary-part*.json")):
            s = json.loads(p.read_text())
            for st in s["steps"]:
                if st["status"] != "ok":
                    rows.append(f"| {s['part']} | {st['step']} | {st['status']} | {st.get('note') or ''} |")
    if not rows:
        return ["Every step of every call passed."]
    return ["| call | step | status | note |", "|---|---|---|---|", *rows]


def render(folders: Sequence[Path]) -> str:
    env = _load(folders, "env.json") or {}
    summaries = [json.loads(p.read_text()) for f in folders for p in sorted(f.glob("summary-part*.json"))]
    dry = any(s.get("dry_run") for s in summaries)
    torch_info = env.get("torch", {})
    head = [f"Run: {'a dry run on the CPU (tiny shapes, 1 prompt x 8 tokens): code paths only, not results' if dry else torch_info.get('device', 'GPU')}"
            f"; torch {torch_info.get('version', '?')}, CUDA {torch_info.get('cuda_build') or '—'}, Python {env.get('python', '?')}."]
    parts = [head,
             bench_table(_load(folders, "bench-torch-guard.json"), _load(folders, "bench-torch-noguard.json"),
                         CPU_TORCH_BENCH, "Torch backend, SmolLM2-135M-Instruct + the shipped head"),
             cost_table(_load(folders, "cost-curve-8b.json"), _load(folders, "cost-curve-smollm2.json"),
                        _load([CPU_TORCH_CURVE.parent], CPU_TORCH_CURVE.name)),
             prediction_table(_load(folders, "cost-curve-8b.json")),
             bench_table(None, _load(folders, "bench-gguf.json"), CPU_GGUF_BENCH,
                         "GGUF backend (llama-cpp-python built for CUDA), guard off"),
             ["**Steps that did not pass**:", "", *status_lines(folders)]]
    return "\n".join(line for block in parts if block for line in (*block, ""))


def write_doc(doc: Path, text: str) -> None:
    page = doc.read_text()
    if BEGIN not in page or END not in page:
        raise SystemExit(f"error: {doc} has no {BEGIN} ... {END} block\nhint: add the two markers where the tables go")
    before, rest = page.split(BEGIN, 1)
    _, after = rest.split(END, 1)
    doc.write_text(f"{before}{BEGIN}\n{text.rstrip()}\n{END}{after}")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", type=Path, help="results folders (files returned by the device calls)")
    ap.add_argument("--doc", type=Path, default=None, help="write the tables into this page's results block")
    args = ap.parse_args(argv)
    missing = [str(f) for f in args.folders if not f.is_dir()]
    if missing:
        print(f"error: no folder {', '.join(missing)}\nhint: pass the folders the device calls returned", file=sys.stderr)
        return 2
    if not any(f.glob("summary-part*.json") for f in args.folders):
        print("error: no summary-part*.json in the folders given\nhint: pass the files of `gpu_check.sh part N` calls",
              file=sys.stderr)
        return 1
    text = render(args.folders)
    if args.doc:
        write_doc(args.doc, text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
