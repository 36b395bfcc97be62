"""Where a pretrained checkpoint comes from: a local folder in place, a URL copied by fsspec, bad folders refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlops_training.errors import TrainingError
from mlops_training.pretrained import resolve_checkpoint


def _folder(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text('{"model_type": "llama"}')
    (path / "model.safetensors").write_bytes(b"x")
    (path / "tokenizer.json").write_text("{}")
    return path


def test_a_relative_path_resolves_against_the_root_in_place(tmp_path: Path) -> None:
    _folder(tmp_path / "ckpt" / "base")
    assert resolve_checkpoint("ckpt/base", tmp_path, tmp_path / "cache") == tmp_path / "ckpt" / "base"
    assert not (tmp_path / "cache").exists()


def test_a_url_is_copied_once_into_the_cache(tmp_path: Path) -> None:
    src = _folder(tmp_path / "remote" / "base")
    local = resolve_checkpoint(f"file://{src}", tmp_path, tmp_path / "cache")
    assert local.parent == tmp_path / "cache"
    assert sorted(p.name for p in local.iterdir()) == [".complete", "config.json", "model.safetensors",
                                                       "tokenizer.json"]
    (src / "config.json").unlink()  # a second resolve reuses the complete copy, it does not fetch again
    assert resolve_checkpoint(f"file://{src}", tmp_path, tmp_path / "cache") == local


def test_a_folder_without_config_or_safetensors_is_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(TrainingError, match=r"'empty'.*no config\.json"):
        resolve_checkpoint("empty", tmp_path, tmp_path / "cache")
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "config.json").write_text("{}")
    (bare / "pytorch_model.bin").write_bytes(b"x")
    with pytest.raises(TrainingError, match=r"no \*\.safetensors.*never pickle"):
        resolve_checkpoint("bare", tmp_path, tmp_path / "cache")
