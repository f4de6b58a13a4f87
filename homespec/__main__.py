"""`python -m homespec` runs the CLI."""

from homespec.cli import _entry

_entry()
