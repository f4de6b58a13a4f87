"""The import contracts in pyproject.toml ([tool.importlinter]) hold: homespec's packages import
downward only, no package's modules import each other in a cycle, the planner never imports
torch, llama_cpp or exllamav2, and the GGUF run path never imports torch (docs/architecture.md,
"Layers" and "Where each part runs"). `lint-imports` prints the same report from the command
line. Each torch contract is also shown to catch a planted violation."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
from importlinter import configuration
from importlinter.application.use_cases import lint_imports

import homespec

ROOT = Path(__file__).resolve().parent.parent
RUN_PATH = "The GGUF run path never imports torch itself"
# Where torch is imported, reached from the run path only lazily, for a torch target, EXL2, the torch
# EAGLE head, training and head export (speculative/methods.py, backends/registry.py, the cli's train and
# export commands).
TORCH_SIDE = ("homespec.backends.torch", "homespec.backends.exl2", "homespec.nets", "homespec.kernels",
              "homespec.train", "homespec.heads")


def _contract(name: str) -> dict:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return next(c for c in config["contracts"] if c["name"] == name)


def test_the_import_contracts_hold(capsys):
    # the graph is built from the homespec this test imports: this checkout's, not an installed copy
    assert Path(homespec.__file__).resolve().parent == ROOT / "homespec"
    configuration.configure()  # what the lint-imports command sets up before it checks
    kept = lint_imports(config_filename=str(ROOT / "pyproject.toml"), cache_dir=None, no_logo=True)
    report = capsys.readouterr().out
    assert kept, report
    assert "0 broken" in report


def _torch_leaks(graph: grimp.ImportGraph) -> list[tuple[str, ...]]:
    """Chains from the run path to torch that pass through no torch-side module (none, when it
    reaches torch only through the lazy imports into TORCH_SIDE)."""
    run_path = _contract(RUN_PATH)["source_modules"]

    def on_run_path(m: str) -> bool:
        return any(m == p or m.startswith(p + ".") for p in run_path)

    for pkg in TORCH_SIDE:  # no chain may pass through them: cut every import of them
        for m in {pkg, *graph.find_descendants(pkg)}:
            if on_run_path(m):  # homespec.train.config: the defaults `homespec --help` shows
                continue
            for importer in graph.find_modules_that_directly_import(m):
                graph.remove_import(importer=importer, imported=m)
    return [chain for p in run_path for chain in graph.find_shortest_chains(p, "torch", as_packages=True)]


def test_the_run_path_reaches_torch_only_through_torch_side_modules():
    """What the forbidden contract leaves to direct imports: no chain of imports from the run path
    gets to torch except through a module that is torch's by design."""
    graph = grimp.build_graph("homespec", include_external_packages=True, cache_dir=None)
    assert _torch_leaks(graph) == []
    # planted: a run-path module importing a helper that imports torch is found
    graph = grimp.build_graph("homespec", include_external_packages=True, cache_dir=None)
    graph.add_import(importer="homespec.engine.core", imported="homespec.formats.planted")
    graph.add_import(importer="homespec.formats.planted", imported="torch")
    assert ("homespec.engine.core", "homespec.formats.planted", "torch") in _torch_leaks(graph)


def _lint_a_copy(tmp_path: Path, plant: dict[str, str]) -> subprocess.CompletedProcess:
    """lint-imports over a copy of the package with `plant` ({relative path: source}) added."""
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "data")
    shutil.copytree(ROOT / "homespec", tmp_path / "homespec", ignore=skip)
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    for rel, source in plant.items():
        (tmp_path / rel).write_text(source)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}  # the copy, ahead of the editable install
    lint = Path(sys.executable).with_name("lint-imports")
    return subprocess.run([str(lint), "--no-cache", "pyproject.toml"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)


def test_a_planted_torch_import_breaks_the_run_path_and_planner_contracts(tmp_path):
    out = _lint_a_copy(tmp_path, {"homespec/engine/planted.py": "import torch\n",
                                  "homespec/plan/planted.py": "import torch\n"})
    assert out.returncode != 0
    assert f"{RUN_PATH} BROKEN" in out.stdout and "homespec.engine.planted -> torch" in out.stdout
    assert "never import torch, llama_cpp or exllamav2 BROKEN" in out.stdout
    assert "homespec.plan.planted -> torch" in out.stdout
