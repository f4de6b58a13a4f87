"""Atomic file writes: a temporary file beside the target, then one rename.

A reader (or a run that was cut off) sees the old file or the new one, never half of one. The
temporary file gets the permissions an ordinary new file would have (0666 less the umask), so
a head, a bench result or a data file written by homespec is as readable as one written by
`open()`; `tempfile.mkstemp` alone would leave it 0600.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Callable


def write_with(path: str | os.PathLike[str], write: Callable[[str], None]) -> None:
    """Call `write(tmp_path)` to fill a temporary file beside `path`, then rename it to `path`.
    A writer's failure that is the system's (a full disk), whatever the writer raised it as, is an
    OSError with its errno (homespec.userfiles.write_error says it in one line)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except Exception as e:
        Path(tmp).unlink(missing_ok=True)
        code = _os_error(e)
        if code is None:
            raise
        raise OSError(code, os.strerror(code), str(path)) from e
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _os_error(e: Exception) -> int | None:
    """The errno of a failure the operating system reported: an OSError's, or one a library written
    in Rust folds into its own exception's message (safetensors: "I/O error: ... (os error 28)")."""
    if isinstance(e, OSError):
        return e.errno
    found = re.search(r"\(os error (\d+)\)", str(e))
    return int(found.group(1)) if found else None


def nearest_existing(path: str | os.PathLike[str]) -> Path:
    """The nearest ancestor of `path` that exists (what decides whether it can be created)."""
    parent = Path(path).parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    return parent


def write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    write_with(path, lambda tmp: Path(tmp).write_bytes(data))


def write_text(path: str | os.PathLike[str], text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def _umask() -> int:
    mask = os.umask(0o022)  # the only way to read it is to set it
    os.umask(mask)
    return mask
