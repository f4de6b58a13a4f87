"""A --model that is not a regular file or a directory is refused by what it is, before anything
opens it: a FIFO (open() would block forever), /dev/zero, a loop of links, a link to nothing, a
file the kernel will not read. Each command runs in a child process with a timeout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from homespec.errors import UsageError
from homespec.userfiles import existing

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def odd(tmp_path) -> dict[str, str]:
    fifo = tmp_path / "f.gguf"
    os.mkfifo(fifo)
    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    (tmp_path / "dangling.gguf").symlink_to(tmp_path / "nowhere.gguf")
    return {"fifo": str(fifo), "zero": "/dev/zero", "loop": str(tmp_path / "loop1"),
            "dangling": str(tmp_path / "dangling.gguf"), "mem": "/proc/self/mem"}


WORDS = {"fifo": "is a FIFO", "zero": "is a character device", "loop": "loop of symbolic links",
         "dangling": "symbolic link to nothing", "mem": "cannot read"}


@pytest.mark.parametrize("kind", list(WORDS))
def test_existing_names_what_the_path_is(odd, kind):
    if kind == "mem" and not Path("/proc/self/mem").exists():
        pytest.skip("no /proc")
    with pytest.raises(UsageError, match=WORDS[kind]):
        existing(odd[kind])


def test_existing_takes_files_and_directories_and_nothing(tmp_path):
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    assert existing(str(tmp_path / "m.gguf")) == tmp_path / "m.gguf"
    assert existing(str(tmp_path)) == tmp_path
    assert existing(str(tmp_path / "absent.gguf")) is None
    assert existing(str(tmp_path / "m.gguf" / "under-a-file")) is None


@pytest.mark.parametrize("command", [["plan"], ["generate", "--method", "none", "-p", "hi", "-n", "1"]])
@pytest.mark.parametrize("kind", ["fifo", "zero", "loop", "mem"])
def test_a_model_that_is_no_file_is_a_usage_error_not_a_hang(odd, command, kind):
    if kind == "mem" and not Path("/proc/self/mem").exists():
        pytest.skip("no /proc")
    r = subprocess.run([sys.executable, "-m", "homespec", *command, "--model", odd[kind]], cwd=ROOT, timeout=60,
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and lines[0].startswith("error: ") and WORDS[kind] in lines[0], r.stderr[-1000:]
    assert lines[-1].startswith("hint: ") and "Traceback" not in r.stderr
