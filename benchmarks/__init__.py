"""homespec's benchmarks: one runner, one set-up module, one results format.

    python -m benchmarks                      list the suites
    python -m benchmarks SUITE [ARGS...]      run one (SUITE --help: its flags)

Each suite (benchmarks/suites/<name>.py) keeps its own measurement; the runner parses the flags every suite
shares (benchmarks/harness.py) and writes the results file (benchmarks/results.py), the same top-level
fields for every suite. docs/results/README.md maps the old script names to the suites.
"""
