"""With ``require_pin`` training reads exactly the pinned data version: checked against real DVC (the pointer
``dvc add`` writes, ``dvc status`` on the folder), the md5 read back from the pointer file with PyYAML."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from mlops_config import DataConfig
from mlops_features import DataError, check_pinned_data
from mlops_features.landing import ensure_workspace, version_accepted

pytestmark = pytest.mark.integration


def test_only_the_pinned_unchanged_version_passes(tmp_path: Path) -> None:
    data = DataConfig()
    folder = tmp_path / data.validated_dir
    folder.mkdir(parents=True)
    for day in (1, 2):
        pd.DataFrame({"transaction_id": [f"t{day}-{i}" for i in range(5)], "amount": [1.0] * 5}).to_parquet(
            folder / f"day-{day}.parquet")
    ensure_workspace(tmp_path)
    pointer = version_accepted(data, tmp_path, push=False)
    md5 = yaml.safe_load(pointer.read_text())["outs"][0]["md5"]
    assert md5.endswith(".dir")
    assert check_pinned_data(data, tmp_path, md5) == md5
    other = "0" * 32 + ".dir"
    with pytest.raises(DataError, match=rf"pin names '{other}' but the accepted area is version '{md5}'"):
        check_pinned_data(data, tmp_path, other)
    (folder / "day-3.parquet").write_bytes((folder / "day-1.parquet").read_bytes())  # a file the version lacks
    with pytest.raises(DataError, match=r"differs from its pointer 'data/validated.dvc'.*mlops data pull --force"):
        check_pinned_data(data, tmp_path, md5)
    pointer.unlink()
    with pytest.raises(DataError, match=r"'data/validated.dvc' does not exist .* run `mlops data pull`"):
        check_pinned_data(data, tmp_path, md5)
