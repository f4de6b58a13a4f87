"""Every file a user names, looked at before anything opens it, read within a bound, written where
it can be: one way for every file option (`--model`, `--prompts`, `--calibrate`,
`--chat-template-file`, `--init`, chat's `/save` and `--resume`, bench's and export's outputs).

A file to read must be a regular file. Anything else is refused by what it is before it is opened:
a FIFO would block `open()` forever, a character device (/dev/zero) reads without end, a directory
is no file. A regular file is then opened without blocking, checked again on the open descriptor
(a path swapped since cannot sneak a FIFO in), and read at most up to the bound its purpose has
(`Purpose.limit`): beyond it, one line saying so, never a MemoryError. Large inputs are streamed
line by line (`lines`), a line itself bounded. A file to write is checked before the work that
fills it (`writable`), and a disk that fills while writing is said as such (`write_error`).

Each refusal is a UsageError (exit 2) naming the flag, what the path is and what to pass instead;
a full disk while writing is a runtime error (exit 1).

Ground floor: imports nothing of homespec but its errors.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from homespec.errors import HomespecError, UsageError

MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class Purpose:
    """What a file is for: how it is called in messages, the most bytes read of it, what to pass."""

    what: str  # "prompts file"
    limit: int  # bytes
    hint: str  # what a good one is


# The bounds: each far above any real file of its kind, far below what exhausts a machine's memory.
MODEL = Purpose("model file", 1 << 62, "pass a regular file (a .gguf, a config.json) or a model directory")
# a prompts file is streamed; a line is one prompt (a 16M-token prompt, limits.MAX_CTX, is ~64 MiB of text)
PROMPTS = Purpose("prompts file", 1 << 30, 'pass a JSONL file, one {"prompt": "..."} object per line')
PROMPT_LINE = 64 * MIB
CALIBRATION = Purpose("bench result", 64 * MIB, "write one with `homespec bench --json-out FILE` and pass FILE")
TEMPLATE = Purpose("chat template", 4 * MIB, "pass a Jinja chat template (a text file)")
CHAT = Purpose("saved chat", 256 * MIB, "pass a chat homespec saved (a .json file in the chats folder)")
CONFIG = Purpose("config.json", 16 * MIB, "pass the directory of an EAGLE-3 head (config.json + model.safetensors)")

_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))


def _kind(mode: int) -> str:
    return next((k for test, k in _KINDS if test(mode)), "not a regular file")


def _label(name: str, flag: str | None) -> str:
    return f"{flag} {name}" if flag else str(name)


def _stat(name: str, flag: str | None, hint: str) -> tuple[Path, os.stat_result | None]:
    """(the path, its stat after links; None when nothing is there). Never opens anything."""
    path = Path(os.path.expanduser(name))
    try:
        return path, path.stat()
    except FileNotFoundError:
        if path.is_symlink():
            raise UsageError(f"{_label(name, flag)} is a symbolic link to nothing ({os.readlink(path)})",
                             hint=hint) from None
        return path, None
    except NotADirectoryError:  # a path under a file: nothing can be there
        return path, None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UsageError(f"{_label(name, flag)} is a loop of symbolic links", hint=hint) from None
        raise UsageError(f"cannot look at {_label(name, flag)}: {e.strerror or e}", hint=hint) from None


def existing(name: str, what: str = "model", purpose: Purpose = MODEL) -> Path | None:
    """The path `name` names when something is there, a regular file or a directory (a link's target
    checked); None when nothing is there. Anything else is a UsageError naming what it is. (How a
    --model spelling is told from a path: homespec.sources.resolve.)"""
    path, st = _stat(name, None, purpose.hint)
    if st is None:
        return None
    if stat.S_ISDIR(st.st_mode):
        return path
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{name} is {_kind(st.st_mode)}, not a {what} file", hint=purpose.hint)
    try:
        with _open(path) as f:
            f.read(1)
    except OSError as e:
        raise UsageError(f"cannot read {name}: {e.strerror or e}", hint=f"check that it is a readable {what} file") \
            from None
    return path


def regular(name: str, flag: str | None, purpose: Purpose) -> Path:
    """The regular file `name` names (checked, not opened); a missing path or anything else is a
    UsageError naming the flag and what is there."""
    path, st = _stat(name, flag, purpose.hint)
    if st is None:
        raise UsageError(f"{_label(name, flag)} does not exist", hint=purpose.hint)
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{_label(name, flag)} is {_kind(st.st_mode)}, not a {purpose.what}", hint=purpose.hint)
    return path


def _open(path: Path):
    """A binary reader on a regular file: opened without blocking (a FIFO swapped in after the look
    would otherwise block here), checked on the descriptor itself."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, f"it is {_kind(st.st_mode)}")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _too_large(name: str, flag: str | None, purpose: Purpose, size: int | None = None) -> UsageError:
    got = f" ({size / MIB:,.0f} MiB)" if size else ""
    return UsageError(f"{_label(name, flag)} is larger{got} than a {purpose.what} may be ({_size(purpose.limit)})",
                      hint=purpose.hint)


def _size(n: int) -> str:
    return f"{n / MIB:g} MiB" if n < 1 << 30 else f"{n / (1 << 30):g} GiB"


def read_bytes(name: str, flag: str | None, purpose: Purpose) -> bytes:
    """The whole of a regular file of at most `purpose.limit` bytes (refused otherwise, unread)."""
    path = regular(name, flag, purpose)
    try:
        with _open(path) as f:
            size = os.fstat(f.fileno()).st_size
            if size > purpose.limit:
                raise _too_large(name, flag, purpose, size)
            data = f.read(purpose.limit + 1)  # a file that says 0 bytes (/proc) is bounded too
    except OSError as e:
        raise UsageError(f"cannot read {_label(name, flag)}: {e.strerror or e}", hint=purpose.hint) from None
    if len(data) > purpose.limit:
        raise _too_large(name, flag, purpose)
    return data


def read_text(name: str, flag: str | None, purpose: Purpose) -> str:
    """read_bytes as UTF-8 text (a file that is not: a UsageError naming the first bad byte)."""
    data = read_bytes(name, flag, purpose)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"{_label(name, flag)} is not UTF-8 text (byte {e.start})",
                         hint=f"save it as UTF-8; {purpose.hint}") from None


def lines(name: str, flag: str | None, purpose: Purpose, line_limit: int) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line of a regular UTF-8 file, streamed: the file's bytes bounded
    by `purpose.limit`, each line's by `line_limit` (a UsageError naming the line beyond them)."""
    path = regular(name, flag, purpose)
    try:
        f = _open(path)
    except OSError as e:
        raise UsageError(f"cannot read {_label(name, flag)}: {e.strerror or e}", hint=purpose.hint) from None
    with f:
        size = os.fstat(f.fileno()).st_size
        if size > purpose.limit:  # refused unread
            raise _too_large(name, flag, purpose, size)
        total, lineno = 0, 0
        while True:
            try:
                raw = f.readline(line_limit + 1)
            except OSError as e:
                raise UsageError(f"cannot read {_label(name, flag)}: {e.strerror or e}", hint=purpose.hint) from None
            if not raw:
                return
            lineno += 1
            total += len(raw)
            if total > purpose.limit:
                raise _too_large(name, flag, purpose)
            if len(raw) > line_limit:
                raise UsageError(f"{_label(name, flag)}: line {lineno} is longer than {_size(line_limit)}",
                                 hint=f"split it, or shorten it; {purpose.hint}")
            try:
                yield lineno, raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise UsageError(f"{_label(name, flag)}: line {lineno} is not UTF-8 text (byte {e.start})",
                                 hint=f"save it as UTF-8; {purpose.hint}") from None


# --- files to write ---------------------------------------------------------------------------

def writable(name: str, flag: str | None, example: str, *, directory: bool = False) -> Path:
    """A path a result can be written to, checked before the work that makes it: not a directory
    (unless `directory`), no FIFO or device, and under a directory this process may write in (the
    nearest one that exists, where the missing ones would be made). -> the path."""
    path, st = _stat(name, flag, f"name a new file, e.g. {flag} {example}")
    if not directory and (str(name).endswith(("/", os.sep)) or (st is not None and stat.S_ISDIR(st.st_mode))):
        raise UsageError(f"{_label(name, flag)} is a directory", hint=f"name a file, e.g. {flag} {path / example}")
    if st is not None and not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{_label(name, flag)} is {_kind(st.st_mode)}, not a file to write",
                         hint=f"name a new file, e.g. {flag} {example}")
    parent = path if directory and st is not None else path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise UsageError(f"{_label(name, flag)}: {parent} is a file, not a directory",
                         hint=f"name a file in a directory, e.g. {flag} {example}")
    if (why := _cannot_create_in(parent)) is not None:
        raise UsageError(f"{_label(name, flag)}: cannot write in {parent} ({why})",
                         hint=f"name a file in a directory you may write in, e.g. {flag} {example}")
    return path


def _cannot_create_in(folder: Path) -> str | None:
    """Why no file can be made in `folder` (None: one can). Tried, not inferred: permission bits say
    yes to root on a read-only file system, and /proc or /sys refuse whoever asks."""
    import tempfile

    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".homespec-check-")
    except OSError as e:
        return "it takes no new files" if e.errno == errno.ENOENT else e.strerror or str(e)
    os.close(fd)
    os.unlink(tmp)
    return None


FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)  # no space, over a quota, over the file-size limit


def write_error(e: OSError, name: str | os.PathLike[str], flag: str | None = None) -> HomespecError:
    """An OSError met while writing `name`, as one line: a full disk is a runtime error (exit 1);
    a path this process may not write a usage error (exit 2)."""
    label = _label(str(name), flag)
    if e.errno in FULL:
        return HomespecError(f"cannot write {label}: {e.strerror or 'no space left'} (the disk is full)",
                             hint="free some space there, or write somewhere else")
    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return UsageError(f"cannot write {label}: {e.strerror}", hint="name a path you may write to")
    return HomespecError(f"cannot write {label}: {e.strerror or e}", hint="check the path and the disk")
