"""What a path names on this machine, checked before anything opens it.

A model is a regular file or a directory. Anything else is refused by its kind before a reader
opens it: a FIFO would block `open()` forever, a character device (/dev/zero) read endlessly,
and a regular file the kernel will not read (/proc/self/mem, no permission) fails here in one
line instead of inside a reader. A loop of symbolic links and a link to nothing are named as
such, not taken for a catalogue name or a missing file.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from homespec.errors import UsageError

_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
HINT = "pass a regular file (a .gguf, a config.json) or a model directory"


def existing(name: str, what: str = "model") -> Path | None:
    """The path `name` names when something is there (a link's target checked), a regular file or a
    directory; None when nothing is there. Anything else is a UsageError naming what it is."""
    path = Path(os.path.expanduser(name))
    try:
        st = path.stat()  # follows links; never opens, so a FIFO cannot block here
    except FileNotFoundError:
        if path.is_symlink():
            raise UsageError(f"{name} is a symbolic link to nothing ({os.readlink(path)})", hint=HINT) from None
        return None
    except NotADirectoryError:  # a path under a file: nothing can be there
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UsageError(f"{name} is a loop of symbolic links", hint=f"point the link at a {what}") from None
        raise UsageError(f"cannot look at {name}: {e.strerror or e}", hint=HINT) from None
    if stat.S_ISDIR(st.st_mode):
        return path
    if not stat.S_ISREG(st.st_mode):
        kind = next((k for test, k in _KINDS if test(st.st_mode)), "not a regular file")
        raise UsageError(f"{name} is {kind}, not a {what} file", hint=HINT)
    try:
        with open(path, "rb") as f:
            f.read(1)
    except OSError as e:
        raise UsageError(f"cannot read {name}: {e.strerror or e}", hint=f"check that it is a readable {what} file") \
            from None
    return path
