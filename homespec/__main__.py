"""`python -m homespec` runs the CLI."""

import sys

from homespec.cli import main

sys.exit(main())
