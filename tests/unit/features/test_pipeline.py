"""prepare_local_data from nothing, and the data version it reports."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from mlops_config import DataConfig
from mlops_features import DataError, data_version


def test_prepared_store_reports_every_step(prepared: tuple) -> None:
    root, data, features = prepared
    assert (root / features.online_store_path).is_file()
    assert (root / features.registry).is_file()
    assert len(list((root / data.validated_dir).glob("*.parquet"))) == data.days


def test_data_version_is_a_content_hash_of_the_validated_area(tmp_path: Path) -> None:
    data = DataConfig()
    folder = tmp_path / data.validated_dir
    with pytest.raises(DataError, match="no validated data"):
        data_version(data, tmp_path)
    folder.mkdir(parents=True)
    (folder / "a.parquet").write_bytes(b"one")
    (folder / "b.parquet").write_bytes(b"two")
    first = data_version(data, tmp_path)
    expected = hashlib.sha256(b"a.parquet\0one\0b.parquet\0two\0").hexdigest()
    assert first == expected
    (folder / "b.parquet").write_bytes(b"TWO")
    assert data_version(data, tmp_path) != first
