"""Where chats are saved, and finding and reading one back (no model needed)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from homespec.chat.store import ChatFile, chats_dir, find, load
from homespec.errors import HomespecError, UsageError


@pytest.fixture
def folder(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("HOMESPEC_CHATS_DIR", str(tmp_path / "chats"))
    return tmp_path / "chats"


def test_folder_follows_the_platform_convention(tmp_path, monkeypatch):
    monkeypatch.delenv("HOMESPEC_CHATS_DIR", raising=False)
    monkeypatch.setattr("sys.platform", "linux")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert chats_dir() == tmp_path / "data" / "homespec" / "chats"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/ignored")  # the XDG spec: a relative one is invalid
    assert chats_dir() == tmp_path / ".local" / "share" / "homespec" / "chats"
    monkeypatch.delenv("XDG_DATA_HOME")
    assert chats_dir() == tmp_path / ".local" / "share" / "homespec" / "chats"
    monkeypatch.setenv("HOMESPEC_CHATS_DIR", str(tmp_path / "mine"))
    assert chats_dir() == tmp_path / "mine"


def test_write_then_load_round_trips_and_keeps_the_file(folder):
    f = ChatFile.new()
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello — ça va?"}]
    f.write(msgs, model="/m.gguf", method="ngram")
    saved = load(find(f.id))
    assert saved.system == "Be brief."
    assert [m["content"] for m in saved.messages] == ["Hi", "Hello — ça va?"]
    assert (saved.model, saved.method) == ("/m.gguf", "ngram")
    assert saved.file.path == f.path and saved.file.created == f.created  # resuming continues the same file
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]  # no temporary file left behind


def test_new_files_never_reuse_a_name(folder):
    a = ChatFile.new()
    a.write([{"role": "user", "content": "x"}], model=None, method=None)
    b = ChatFile.new()
    assert b.path != a.path and not b.path.exists()


def test_latest_is_the_newest_file(folder):
    folder.mkdir(parents=True)
    for i, name in enumerate(["b", "a", "c"]):
        ChatFile(folder / f"{name}.json").write([{"role": "user", "content": name}], model=None, method=None)
        os.utime(folder / f"{name}.json", (time.time() + i, time.time() + i))
    assert find(None) == folder / "c.json"
    assert find("a") == folder / "a.json" and find("a.json") == folder / "a.json"


def test_a_file_elsewhere_is_read_not_rewritten(folder, tmp_path):
    mine = tmp_path / "kept.json"
    ChatFile(mine).write([{"role": "user", "content": "x"}], model=None, method=None)
    saved = load(find(str(mine)))
    assert saved.file.path.parent == folder  # the conversation goes on in a new file in the chats folder
    assert saved.file.path != mine


@pytest.mark.parametrize("ref", [None, "20990101-000000", "/no/such/file.json"])
def test_missing_chat_is_a_usage_error_with_a_hint(folder, ref):
    with pytest.raises(UsageError) as e:
        find(ref)
    assert "\n" not in e.value.message and "homespec chat" in e.value.hint


@pytest.mark.parametrize("body", ["{not json", '{"messages": "hi"}', '{"messages": [{"role": "robot", "content": 1}]}',
                                  "[1, 2]", "\xff\xfe"])
def test_damaged_chat_is_a_one_line_error(folder, body):
    folder.mkdir(parents=True)
    bad = folder / "bad.json"
    bad.write_bytes(body.encode("latin-1"))
    with pytest.raises(HomespecError) as e:
        load(find("bad"))
    assert "damaged" in e.value.message and "\n" not in e.value.message
    assert "--resume" in e.value.hint
    assert bad.read_bytes() == body.encode("latin-1")  # never rewritten
