"""Why the windows are udfs: Feast 0.67's local compute engine refuses ``Aggregation(time_window=...)``.

docs/features.md says so; this test checks the claim against the installed Feast. If a Feast upgrade lifts the
limit, this test fails and the windows may move to declared aggregations (their values must stay the same:
tests/unit/features/test_feature_repo.py).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mlops_config import DataConfig, FeaturesConfig
from mlops_features import apply_repo, materialize

Prepared = tuple[Path, DataConfig, FeaturesConfig]

WINDOWED = '''
from datetime import timedelta

from feast import Aggregation, BatchFeatureView, Field
from feast.types import Float64, String

from definitions import TTL, transactions, user

user_amount_windowed = BatchFeatureView(
    name="user_amount_windowed", source=transactions, entities=[user], ttl=TTL, online=True,
    schema=[Field(name="user_id", dtype=String), Field(name="amount", dtype=Float64, tags={"default": "0"})],
    aggregations=[Aggregation(column="amount", function="sum", time_window=timedelta(hours=1))],
)
'''


def test_the_local_engine_refuses_a_time_windowed_aggregation(prepared: Prepared, tmp_path: Path) -> None:
    src, _, features = prepared
    root = tmp_path / "root"
    shutil.copytree(src, root, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "feature_repo" / "windowed.py").write_text(WINDOWED)
    applied = apply_repo(features, root)
    assert "user_amount_windowed" in str(applied), applied  # Feast registers it: the refusal comes at compute time
    with pytest.raises(Exception, match="Time window aggregation is not supported in the local compute engine"):
        materialize(features, root)
