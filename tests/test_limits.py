"""Every number a user can type is a range (homespec.limits), checked where options are parsed:
nan, infinities and values outside the range are one-line usage errors (exit 2) before anything
loads, for every command that takes the option; values inside it, however small, run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from homespec import limits
from homespec.cli import main
from homespec.errors import UsageError

ROOT = Path(__file__).resolve().parent.parent
BAD_FLOATS = ["nan", "NaN", "inf", "-inf", "1e400"]

# (command and its required arguments, the option, a value outside its range)
FLOAT_OPTIONS = [
    (["generate", "-p", "hi"], "--temperature", "2.5"),
    (["generate", "-p", "hi"], "--top-p", "0"),
    (["chat"], "--temperature", "-1"),
    (["chat"], "--top-p", "1.5"),
    (["bench", "--methods", "none"], "--temperature", "3"),
    (["plan"], "--ram", "0.1"),
    (["draft", "train", "--out", "never-made"], "--hidden-weight", "-1"),
]


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _one_usage_error(code: int, err: str, words: str) -> None:
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 2 and lines[0].startswith("error: ") and words in lines[0], err
    assert lines[1].startswith("hint: ")


@pytest.mark.parametrize("command, flag, outside", FLOAT_OPTIONS)
@pytest.mark.parametrize("value", BAD_FLOATS + ["outside"])
def test_every_float_option_refuses_nan_inf_and_out_of_range(capsys, command, flag, outside, value):
    value = outside if value == "outside" else value
    code, _, err = run(capsys, *command, f"{flag}={value}")
    _one_usage_error(code, err, f"{flag} ")


@pytest.mark.parametrize("command", [["generate", "-p", "hi"], ["chat"], ["bench", "--methods", "none"]])
@pytest.mark.parametrize("value", ["0", "-1", str(1 << 40)])
def test_max_tokens_is_one_range_for_every_running_command(capsys, command, value):
    code, _, err = run(capsys, *command, f"--max-tokens={value}")
    _one_usage_error(code, err, f"--max-tokens {value} is outside [1, ")


@pytest.mark.parametrize("value", [str(2**64), str(-(2**63) - 1)])
def test_a_seed_outside_a_signed_64_bit_integer_is_refused(capsys, value):
    code, _, err = run(capsys, "generate", "-p", "hi", "--seed", value)
    _one_usage_error(code, err, "--seed")


@pytest.mark.parametrize("args, words", [
    (["serve", "--max-body-mib", "1000000000000"], "--max-body-mib 1000000000000 is outside [1, 1024]"),
    (["serve", "--queue", str(10**9)], "--queue"),
    (["serve", "--parallel", "100000"], "--parallel 100000"),
])
def test_server_numbers_are_bounded_above(capsys, args, words):
    code, _, err = run(capsys, *args)
    _one_usage_error(code, err, words)


def test_the_ranges_are_finite_and_name_a_value_that_works():
    for r in (limits.TEMPERATURE, limits.TOP_P, limits.TOP_K, limits.SEED, limits.MAX_TOKENS, limits.THREADS,
              limits.MAX_BODY_MIB, limits.HIDDEN_WEIGHT, limits.RAM_GIB, limits.PORT, limits.PARALLEL, limits.QUEUE):
        assert r.problem(r.parse(r.example.split()[0])) is None, r
        assert r.problem(float("nan")) and r.problem(float("inf")) and r.problem(r.hi * 2 + 1), r
        with pytest.raises(UsageError):
            r.check(r.hi * 2 + 1)


def test_threads_are_capped_at_the_cpus_and_say_so():
    cpus = limits.cpu_count()
    assert limits.cap_threads(cpus) == (cpus, None)
    n, note = limits.cap_threads(10_000)
    assert n == cpus and note is not None and "10000" in note and f"{cpus} CPUs" in note
    assert limits.env_threads({"HOMESPEC_THREADS": "3"}) == 3
    with pytest.raises(UsageError, match="HOMESPEC_THREADS=nan"):
        limits.env_threads({"HOMESPEC_THREADS": "nan"})


def _homespec(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "homespec", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}, timeout=timeout)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["flag", "env"])
def test_threads_above_the_cpus_run_on_the_cpus(how):
    """10,000 threads used to start 10,001 threads and stall the machine: now capped, with a note."""
    args = ["generate", "-p", "hi", "-n", "2", "--method", "none", "--ctx", "256", "--json"]
    r = _homespec(*args, *(["--threads", "10000"] if how == "flag" else []),
                  env={"HOMESPEC_THREADS": "10000"} if how == "env" else None)
    source = "--threads" if how == "flag" else "HOMESPEC_THREADS"
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"note: {source} 10000 is more than the {limits.cpu_count()} CPUs" in r.stderr


@pytest.mark.slow
def test_a_tiny_temperature_and_top_p_are_greedy_not_an_error():
    """1e-300 and subnormals are inside the ranges: the answer is the greedy one."""
    base = ["generate", "-p", "Name a colour.", "-n", "6", "--method", "none", "--ctx", "256", "--json"]
    greedy = _homespec(*base)
    tiny = _homespec(*base, "--temperature", "1e-300", "--top-p", "5e-324", "--seed", str(2**63 - 1))
    nucleus = _homespec(*base, "--temperature", "0.8", "--top-p", "1e-300")
    assert greedy.returncode == tiny.returncode == nucleus.returncode == 0, tiny.stderr[-2000:] + nucleus.stderr[-2000:]
    ids = [json.loads(r.stdout)["token_ids"] for r in (greedy, tiny, nucleus)]
    assert ids[0] == ids[1] == ids[2]
