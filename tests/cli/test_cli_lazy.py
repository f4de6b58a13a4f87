"""homespec.cli.lazy: the table of what the commands run, imported on first use. Every entry
resolves to the object it names, the TYPE_CHECKING imports name the same objects (so lint-imports
checks the imports the table makes), and importing the CLI loads none of the modules it defers."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from homespec.cli import lazy

SOURCE = Path(lazy.__file__)


def _type_checking_imports() -> dict[str, tuple[str, str]]:
    """name -> (module, attribute) of the `if TYPE_CHECKING:` block's imports."""
    tree = ast.parse(SOURCE.read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
    out = {}
    for stmt in block.body:
        assert isinstance(stmt, ast.ImportFrom), ast.unparse(stmt)
        for a in stmt.names:
            out[a.asname or a.name] = (stmt.module, a.name)
    return out


def test_the_table_and_the_type_checking_imports_agree():
    assert _type_checking_imports() == lazy.TABLE


@pytest.mark.parametrize("name", sorted(lazy.TABLE))
def test_each_entry_is_the_object_it_names(name):
    module, attribute = lazy.TABLE[name]
    assert getattr(lazy, name) is getattr(importlib.import_module(module), attribute)


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        lazy.nope  # noqa: B018


def test_a_value_replaced_on_its_module_is_what_the_next_use_gets(monkeypatch):
    import homespec.plan.api

    monkeypatch.setattr(homespec.plan.api, "make_plan", "replaced")
    assert lazy.make_plan == "replaced"


def test_importing_the_cli_loads_none_of_the_deferred_modules():
    """`homespec --help` and `homespec plan` build the parser of every command: none of them may
    pull what the table defers (a command that needs a module imports it when it runs)."""
    deferred = sorted({module for module, _ in lazy.TABLE.values()})
    code = ("import sys, homespec.cli; print('\\n'.join(m for m in " + repr(deferred) + " if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == []
