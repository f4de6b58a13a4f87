"""`python -m benchmarks SUITE [ARGS...]`."""

import sys

from benchmarks.runner import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
