"""The import contracts in pyproject.toml ([tool.importlinter]) hold: homespec's packages import
downward only, no package's modules import each other in a cycle, and the planner never imports
torch, llama_cpp or exllamav2 (docs/architecture.md, "Layers"). `lint-imports` prints the same
report from the command line."""

from __future__ import annotations

from pathlib import Path

from importlinter import configuration
from importlinter.application.use_cases import lint_imports

import homespec

ROOT = Path(__file__).resolve().parent.parent


def test_the_import_contracts_hold(capsys):
    # the graph is built from the homespec this test imports: this checkout's, not an installed copy
    assert Path(homespec.__file__).resolve().parent == ROOT / "homespec"
    configuration.configure()  # what the lint-imports command sets up before it checks
    kept = lint_imports(config_filename=str(ROOT / "pyproject.toml"), cache_dir=None, no_logo=True)
    report = capsys.readouterr().out
    assert kept, report
    assert "0 broken" in report
