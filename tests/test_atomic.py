"""Atomic writes: all or nothing, and the permissions of an ordinary new file."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from homespec.atomic import write_bytes, write_with


def test_written_files_get_ordinary_permissions_not_mkstemps_0600(tmp_path):
    old = os.umask(0o022)
    try:
        write_bytes(tmp_path / "a" / "r.json", b"{}\n")
    finally:
        os.umask(old)
    p = tmp_path / "a" / "r.json"
    assert p.read_bytes() == b"{}\n"
    assert stat.S_IMODE(p.stat().st_mode) == 0o644


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    p = tmp_path / "head.safetensors"
    p.write_bytes(b"old")

    def half(tmp: str) -> None:
        with open(tmp, "wb") as f:
            f.write(b"ne")
        raise KeyboardInterrupt  # cut off mid-write

    with pytest.raises(KeyboardInterrupt):
        write_with(p, half)
    assert p.read_bytes() == b"old"
    assert [q.name for q in tmp_path.iterdir()] == ["head.safetensors"]


def test_a_saved_head_is_readable_by_others(tmp_path):
    import torch

    from homespec.nets.eagle3 import Eagle3Config, Eagle3Head, save_head

    torch.manual_seed(0)
    cfg = Eagle3Config(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8, intermediate_size=64,
                       vocab_size=100, draft_vocab_size=50, target_hidden_size=32)
    old = os.umask(0o022)
    try:
        save_head(Eagle3Head(cfg), tmp_path / "head")
    finally:
        os.umask(old)
    for name in ("config.json", "model.safetensors"):
        assert stat.S_IMODE((tmp_path / "head" / name).stat().st_mode) == 0o644


def test_a_writers_system_failure_is_an_oserror_whatever_it_raised(tmp_path):
    """safetensors (Rust) reports a full disk as SafetensorError("... (os error 28)"): an OSError
    with that errno comes out, and no temporary file stays behind."""
    import errno

    class SafetensorLike(Exception):
        pass

    def full(tmp: str) -> None:
        Path(tmp).write_bytes(b"partial")
        raise SafetensorLike("Error while serializing: I/O error: No space left on device (os error 28)")

    with pytest.raises(OSError) as e:
        write_with(tmp_path / "head.safetensors", full)
    assert e.value.errno == errno.ENOSPC and list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError):  # anything else is what it was
        write_with(tmp_path / "x", lambda tmp: (_ for _ in ()).throw(ValueError("bad")))
