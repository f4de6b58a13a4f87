"""`python -m homespec.cli`, as `homespec`."""

from homespec.cli.errors import _entry

_entry()
