"""Where `homespec chat` keeps its conversations, and reading one back for `--resume`.

Each conversation is one JSON file in the chats folder, rewritten atomically (homespec.atomic)
after every answer, so Ctrl-C, a closed terminal or a crash loses at most the answer in flight.
The folder follows the platform's convention for user data:

    $HOMESPEC_CHATS_DIR                                  when set
    $XDG_DATA_HOME/homespec/chats                        Linux and other Unix (XDG base directories)
    ~/.local/share/homespec/chats                        ... when XDG_DATA_HOME is unset or relative
    ~/Library/Application Support/homespec/chats         macOS
    %LOCALAPPDATA%\\homespec\\chats                        Windows

A file's name is its id: the local time the conversation started, `20250131-142503.json`.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from homespec import userfiles
from homespec.atomic import write_text
from homespec.errors import HomespecError, UsageError

ENV_DIR = "HOMESPEC_CHATS_DIR"
FORMAT = "homespec-chat"
ROLES = ("system", "user", "assistant")


def chats_dir() -> Path:
    """The folder chats are saved in (see the module docstring)."""
    env = os.environ.get(ENV_DIR)
    if env:
        return Path(env).expanduser()
    if sys.platform == "darwin":
        base = Path.home() / "Library" / "Application Support"
    elif os.name == "nt":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    else:
        xdg = os.environ.get("XDG_DATA_HOME", "")
        base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".local" / "share"  # the spec ignores a relative one
    return base / "homespec" / "chats"


@dataclass
class ChatFile:
    """One conversation's file: where it goes and when the conversation started."""

    path: Path
    created: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S%z"))

    @property
    def id(self) -> str:
        return self.path.stem

    @classmethod
    def new(cls, folder: Path | None = None) -> "ChatFile":
        """A file for a new conversation, named for the time it starts (never an existing one)."""
        folder = chats_dir() if folder is None else folder
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path, n = folder / f"{stamp}.json", 2
        while path.exists():
            path, n = folder / f"{stamp}-{n}.json", n + 1
        return cls(path)

    def write(self, messages: list[dict[str, str]], *, model: str | None, method: str | None) -> None:
        """Write the whole conversation (system message first, when there is one), atomically."""
        data = {"format": FORMAT, "id": self.id, "created": self.created,
                "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "model": model, "method": method,
                "messages": messages}
        write_text(self.path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


@dataclass(frozen=True)
class SavedChat:
    """A conversation read back from its file."""

    file: ChatFile
    messages: tuple[dict[str, str], ...]  # user and assistant turns, oldest first
    system: str | None
    model: str | None
    method: str | None


def find(ref: str | None) -> Path:
    """The file `--resume` means: None = the newest in the chats folder; else a path or an id."""
    folder = chats_dir()
    if ref is None:
        saved = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime) if folder.is_dir() else []
        if not saved:
            raise UsageError(f"no saved chats in {folder}", hint="start one with `homespec chat`; it is saved as you go")
        return saved[-1]
    for path in (Path(ref).expanduser(), folder / ref, folder / f"{ref}.json"):
        if userfiles.existing(str(path), "saved chat", userfiles.CHAT) is not None and not path.is_dir():
            return path  # a FIFO or a device is refused here, by what it is, before anything opens it
    raise UsageError(f"no saved chat '{ref}' (neither a file nor an id in {folder})",
                     hint="`homespec chat --resume` continues the latest; ids are the file names in that folder")


def is_chat_file(path: Path) -> bool:
    """Whether `path` holds a chat homespec wrote (its JSON says `"format": "homespec-chat"`); what is
    no regular file, or too large for a chat, is not one (and is never opened)."""
    try:
        data = json.loads(userfiles.read_text(str(path), None, userfiles.CHAT))
    except (HomespecError, ValueError, RecursionError):
        return False
    return isinstance(data, dict) and data.get("format") == FORMAT


def load(path: Path) -> SavedChat:
    """Read a chat written by homespec (autosaved or /save); a damaged one is a one-line error."""
    raw = userfiles.read_bytes(str(path), "--resume", userfiles.CHAT)
    try:
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise _corrupt(path, f"not JSON ({' '.join(str(e).split())})") from None
    messages = data.get("messages") if isinstance(data, dict) else None
    if not isinstance(messages, list) or not all(_is_message(m) for m in messages):
        raise _corrupt(path, "no list of {role, content} messages")
    system = messages[0]["content"] if messages and messages[0]["role"] == "system" else None
    turns = tuple({"role": m["role"], "content": m["content"]} for m in messages if m["role"] != "system")
    folder = chats_dir().resolve()
    # a file outside the chats folder (one the user keeps) is only read: the rest goes to a new file
    own = path.resolve().parent == folder
    created = data.get("created") if own and isinstance(data.get("created"), str) else None
    file = ChatFile(path, created) if created else (ChatFile(path) if own else ChatFile.new())
    return SavedChat(file, turns, system, _str(data.get("model")), _str(data.get("method")))


def _is_message(m: object) -> bool:
    return isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content"), str)


def _str(v: object) -> str | None:
    return v if isinstance(v, str) else None


def _corrupt(path: Path, why: str) -> HomespecError:
    return HomespecError(f"saved chat {path} is damaged: {why}",
                         hint="resume another one with `homespec chat --resume ID`, or start anew with `homespec chat`")
