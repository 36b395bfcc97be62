"""The atomic-write helper: a failed write leaves the previous version and no stray file under the name."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mlops_core import atomic_dir, atomic_path, atomic_write_bytes, atomic_write_text


class BoomError(RuntimeError):
    pass


def fail_in_atomic_path(target: Path) -> None:
    with atomic_path(target) as tmp:
        tmp.write_bytes(b"half of the new")
        raise BoomError


def fail_in_atomic_dir(folder: Path) -> None:
    with atomic_dir(folder) as tmp:
        (tmp / "w").write_bytes(b"v2-partial")
        raise BoomError


def test_write_text_replaces_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "a.json"
    atomic_write_text(target, "one")
    atomic_write_bytes(target, b"two")
    assert target.read_bytes() == b"two"
    assert sorted(p.name for p in target.parent.iterdir()) == ["a.json"]


def test_failure_inside_atomic_path_keeps_the_previous_file(tmp_path: Path) -> None:
    target = tmp_path / "a.bin"
    target.write_bytes(b"previous")
    with pytest.raises(BoomError):
        fail_in_atomic_path(target)
    assert target.read_bytes() == b"previous"
    assert [p.name for p in tmp_path.iterdir()] == ["a.bin"]


def test_atomic_dir_swaps_a_whole_folder_and_keeps_the_old_one_on_failure(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    with atomic_dir(folder) as tmp:
        (tmp / "w").write_bytes(b"v1")
        (tmp / "old-only").write_bytes(b"x")
    inode = folder.stat().st_ino
    with pytest.raises(BoomError):
        fail_in_atomic_dir(folder)
    assert (folder / "w").read_bytes() == b"v1" and folder.stat().st_ino == inode
    with atomic_dir(folder) as tmp:
        (tmp / "w").write_bytes(b"v2")
    # The new version replaced the folder as a whole (a file only the old one had is gone).
    assert sorted(os.listdir(folder)) == ["w"] and (folder / "w").read_bytes() == b"v2"
    assert [p.name for p in tmp_path.iterdir()] == ["model"]
