"""homespec.userfiles, the one opener of every file a user names. A --model that is not a regular
file or a directory is refused by what it is, before anything opens it: a FIFO (open() would block
forever), /dev/zero, a loop of links, a link to nothing, a file the kernel will not read (each
command runs in a child process with a timeout). Files to read are bounded by their purpose and
streamed where large; files to write are checked before the work; a full disk is one line."""

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


# --- the one opener every file option goes through (homespec.userfiles) --------------------------

from homespec import userfiles  # noqa: E402
from homespec.errors import HomespecError  # noqa: E402

SMALL = userfiles.Purpose("test file", 100, "pass a small file")


def test_read_refuses_what_is_no_regular_file_without_opening_it(odd, tmp_path):
    for kind in ("fifo", "zero", "loop", "dangling"):
        with pytest.raises(UsageError, match=WORDS[kind]) as e:
            userfiles.read_text(odd[kind], "--flag", SMALL)
        assert e.value.message.startswith("--flag ") and e.value.hint == "pass a small file"
    with pytest.raises(UsageError, match="is a directory, not a test file"):
        userfiles.read_text(str(tmp_path), "--flag", SMALL)
    with pytest.raises(UsageError, match="does not exist"):
        userfiles.read_text(str(tmp_path / "nope"), "--flag", SMALL)


def test_read_is_bounded_by_its_purpose_whatever_the_file_says_of_its_size(tmp_path):
    (tmp_path / "big").write_bytes(b"x" * 101)
    with pytest.raises(UsageError, match=r"is larger \(0 MiB\) than a test file may be"):
        userfiles.read_bytes(str(tmp_path / "big"), None, SMALL)
    (tmp_path / "ok").write_bytes("é".encode("utf-8") * 50)
    assert userfiles.read_text(str(tmp_path / "ok"), None, SMALL) == "é" * 50
    (tmp_path / "latin").write_bytes(b"caf\xe9")
    with pytest.raises(UsageError, match="is not UTF-8 text"):
        userfiles.read_text(str(tmp_path / "latin"), None, SMALL)
    if Path("/proc/self/status").exists():  # a file that says it has 0 bytes: read up to the bound, no further
        with pytest.raises(UsageError, match="is larger"):
            userfiles.read_bytes("/proc/self/status", None, userfiles.Purpose("status", 10, "-"))


def test_lines_stream_with_each_line_bounded(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text("one\ntwo\n" + "x" * 50 + "\nfour\n")
    got = []
    with pytest.raises(UsageError, match="line 3 is longer than") as e:
        for lineno, line in userfiles.lines(str(path), "--prompts", SMALL, line_limit=20):
            got.append((lineno, line))
    assert got == [(1, "one\n"), (2, "two\n")] and "split it" in e.value.hint
    path.write_text("a\n" * 60)  # 120 bytes: beyond the file's bound, refused before any line
    with pytest.raises(UsageError, match="is larger"):
        next(userfiles.lines(str(path), "--prompts", SMALL, line_limit=20))


def test_writable_checks_an_output_before_the_work(odd, tmp_path):
    assert userfiles.writable(str(tmp_path / "new" / "dir" / "out.json"), "--out", "x.json") == \
        tmp_path / "new" / "dir" / "out.json"
    assert not (tmp_path / "new").exists()  # checked, not made
    (tmp_path / "file").write_text("")
    for path, words in ((odd["fifo"], "is a FIFO"), ("/dev/null", "is a character device"),
                        (str(tmp_path), "is a directory"), (str(tmp_path / "file" / "x.json"), "is a file, not a dir"),
                        (str(tmp_path) + "/sub/", "is a directory")):
        with pytest.raises(UsageError, match=words):
            userfiles.writable(path, "--out", "x.json")
    if Path("/proc").is_dir():
        with pytest.raises(UsageError, match="cannot write in /proc"):
            userfiles.writable("/proc/x.json", "--out", "x.json")
    assert list(tmp_path.glob(".homespec-check-*")) == []  # the probe leaves nothing behind


def test_write_errors_say_a_full_disk_in_one_line():
    import errno

    for code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        e = userfiles.write_error(OSError(code, os.strerror(code)), "out.gguf", "--out")
        assert type(e) is HomespecError and e.exit_code == 1 and "the disk is full" in e.message
    e = userfiles.write_error(OSError(errno.EROFS, os.strerror(errno.EROFS)), "out.gguf", "--out")
    assert isinstance(e, UsageError) and e.exit_code == 2
