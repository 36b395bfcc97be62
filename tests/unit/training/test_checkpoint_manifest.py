"""A checkpoint is only loaded when its manifest exists and every file matches its SHA-256."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from mlops_training import CheckpointError
from mlops_training.checkpoint import checkpoint_dirs, latest_checkpoint, verify_checkpoint


def _fake(run: Path, step: int, *, manifest: bool = True) -> Path:
    d = run / f"step_{step:08d}"
    d.mkdir(parents=True)
    (d / "__0_0.distcp").write_bytes(b"shard-bytes" * 10)
    (d / ".metadata").write_bytes(b"meta")
    if manifest:
        files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in d.iterdir()}
        (d / "manifest.json").write_text(json.dumps({"step": step, "world_size": 2, "files": files}))
    return d


def test_latest_complete_checkpoint_wins_incomplete_ones_are_ignored(tmp_path: Path) -> None:
    _fake(tmp_path, 8)
    newest = _fake(tmp_path, 16)
    _fake(tmp_path, 24, manifest=False)  # a save that died before its manifest
    assert [p.name for p in checkpoint_dirs(tmp_path)] == ["step_00000008", "step_00000016"]
    assert latest_checkpoint(tmp_path) == newest
    assert latest_checkpoint(tmp_path / "nothing") is None
    assert verify_checkpoint(newest)["step"] == 16


def test_a_flipped_byte_or_a_missing_file_is_refused(tmp_path: Path) -> None:
    d = _fake(tmp_path, 8)
    shard = d / "__0_0.distcp"
    data = bytearray(shard.read_bytes())
    data[3] ^= 1
    shard.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="does not match its manifest checksum"):
        verify_checkpoint(d)
    shard.unlink()
    with pytest.raises(CheckpointError, match=r"lacks '__0_0\.distcp'"):
        verify_checkpoint(d)
    with pytest.raises(CheckpointError, match="incomplete"):
        verify_checkpoint(_fake(tmp_path, 9, manifest=False))
