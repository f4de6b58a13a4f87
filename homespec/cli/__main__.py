"""`python -m homespec.cli`, as `homespec`."""

import sys

from homespec.cli.errors import main

sys.exit(main())
