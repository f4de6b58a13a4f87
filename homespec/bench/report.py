"""BenchResult -> rich table, Markdown, and a PNG plot."""

from __future__ import annotations

import os
from pathlib import Path

from homespec.atomic import write_bytes
from homespec.bench.categories import by_category
from homespec.bench.run import BenchResult, by_prompt_length, summary

COLUMNS = ("method", "tok/s", "speedup", "tokens/pass", "accept@1", "accept@3", "p50 ms", "p95 ms", "identical", "fallback")


def _rows(result: BenchResult) -> list[list[str]]:
    s = summary(result)["methods"]
    rows = []
    for name, m in s.items():
        dep = m["acceptance_by_depth"]
        rows.append([
            name, f"{m['tokens_per_s']:.1f}", "" if m["speedup"] is None else f"{m['speedup']:.2f}x",
            f"{m['mean_accepted']:.2f}", f"{dep[0]:.0%}" if dep else "", f"{dep[2]:.0%}" if len(dep) > 2 else "",
            f"{m['p50_step_ms']:.1f}", f"{m['p95_step_ms']:.1f}",
            "" if m["identical_fraction"] is None else f"{m['identical_fraction']:.0%}", str(m["fallback_steps"]),
        ])
    return rows


LENGTH_COLUMNS = ("prompt tokens", "method", "prompts", "tok/s", "tau (spec steps)", "worst tok/s vs none")


def _length_rows(result: BenchResult) -> list[list[str]]:
    """The long-context view: one row per (prompt size class, method)."""
    rows = []
    for c in by_prompt_length(result):
        for name, m in c["methods"].items():
            rows.append([f"~{c['class']}", name, str(m["prompts"]), f"{m['tokens_per_s']:.1f}",
                         "" if m["spec_tau"] is None else f"{m['spec_tau']:.2f}",
                         "" if m["min_ratio_vs_none"] is None else f"{m['min_ratio_vs_none']:.2f}x"])
    return rows


CATEGORY_COLUMNS = ("category", "method", "prompts", "tok/s", "speedup", "tau (spec steps)")


def _category_rows(result: BenchResult) -> list[list[str]]:
    """One row per (prompt category, method), where the prompts carry more than one category."""
    table = by_category(result.methods)
    if len(table) < 2:
        return []
    return [[c["category"], name, str(m["prompts"]), f"{m['tokens_per_s']:.1f}",
             "" if m["speedup"] is None else f"{m['speedup']:.2f}x",
             "" if m["spec_tau"] is None else f"{m['spec_tau']:.2f}"]
            for c in table for name, m in c["methods"].items()]


def _long(result: BenchResult) -> bool:
    return any(s.by_context for s in result.methods.values())


def _rounds(result: BenchResult) -> str:
    out = f", {result.repeat} rounds (per prompt: the median round)" if result.repeat > 1 else ""
    return out + (", methods in lockstep" if result.lockstep else "")


def render(result: BenchResult, console) -> None:
    from rich.table import Table

    t = Table(title=f"{Path(result.model).name} on {result.backend}: {result.n_prompts} prompts x "
                    f"{result.max_tokens} tokens, temperature {result.temperature:g}{_rounds(result)}")
    for c in COLUMNS:
        t.add_column(c, justify="left" if c == "method" else "right")
    for r in _rows(result):
        t.add_row(*r)
    console.print(t)
    if _long(result):
        t = Table(title="by prompt length")
        for c in LENGTH_COLUMNS:
            t.add_column(c, justify="left" if c in ("method", "prompt tokens") else "right")
        for r in _length_rows(result):
            t.add_row(*r)
        console.print(t)
    if rows := _category_rows(result):
        t = Table(title="by category (total tokens over total decode time)")
        for c in CATEGORY_COLUMNS:
            t.add_column(c, justify="left" if c in ("category", "method") else "right")
        for r in rows:
            t.add_row(*r)
        console.print(t)


def markdown(result: BenchResult) -> str:
    lines = [f"**{Path(result.model).name}** on **{result.backend}**: {result.n_prompts} prompts, "
             f"{result.max_tokens} tokens each, temperature {result.temperature:g}{_rounds(result)}", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(r) + " |" for r in _rows(result)]
    if _long(result):
        lines += ["", "| " + " | ".join(LENGTH_COLUMNS) + " |", "|" + "---|" * len(LENGTH_COLUMNS)]
        lines += ["| " + " | ".join(r) + " |" for r in _length_rows(result)]
    if rows := _category_rows(result):
        lines += ["", "| " + " | ".join(CATEGORY_COLUMNS) + " |", "|" + "---|" * len(CATEGORY_COLUMNS)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
    m = result.machine
    lines += ["", f"machine: {m.get('platform', '')}, {m.get('cpu_cores', '?')} cores; homespec {m.get('homespec', '')}, "
                  f"torch {m.get('torch', '-')}, llama_cpp {m.get('llama_cpp', '-')}"]
    return "\n".join(lines) + "\n"


def plot(result: BenchResult, path: str | os.PathLike) -> None:
    """Two panels: tokens/s per method, and tokens per target pass against generated position."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = summary(result)["methods"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    names = list(s)
    a.bar(names, [s[n]["tokens_per_s"] for n in names], color="#4878a8")
    a.set_ylabel("tokens / s")
    a.set_title("decode speed")
    for n in names:
        pts = s[n]["by_position"]
        if pts:
            b.plot([(p["start"] + p["end"]) / 2 for p in pts], [p["mean_accepted"] for p in pts], marker="o", label=n)
    b.set_xlabel("generated position (tokens)")
    b.set_ylabel("tokens per target pass")
    b.set_title("acceptance vs position")
    b.legend()
    fig.suptitle(f"{Path(result.model).name} on {result.backend}")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    write_bytes(path, buf.getvalue())
