"""Why the windows are udfs: Feast 0.67 and ``Aggregation(time_window=...)``, checked against the installed Feast.

docs/features.md says (1) the local compute engine refuses a time-windowed aggregation, and (2) Feast's registry
does not store a BatchFeatureView's aggregations, so a view declared with them would be materialized as its raw
column; ``mlops features apply`` therefore refuses such a view. If a Feast upgrade lifts either limit, these
tests fail and the windows may move to declared aggregations (their values must stay the same:
tests/unit/features/test_feature_repo.py).
"""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from mlops_config import DataConfig, FeaturesConfig
from mlops_features import FeatureStoreError, apply_repo, open_store
from mlops_features.repo import in_repo, load_repo

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


def _copy(prepared: Prepared, tmp_path: Path) -> tuple[Path, FeaturesConfig]:
    src, _, features = prepared
    root = tmp_path / "root"
    shutil.copytree(src, root, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "feature_repo" / "windowed.py").write_text(WINDOWED)
    return root, features


def test_the_local_engine_refuses_a_time_windowed_aggregation(prepared: Prepared, tmp_path: Path) -> None:
    root, features = _copy(prepared, tmp_path)
    view = next(v for v in load_repo(features, root).feature_views if v.name == "user_amount_windowed")
    assert view.aggregations[0].time_window is not None
    store = open_store(features, root)
    with in_repo(features, root), pytest.raises(
            ValueError, match="Time window aggregation is not supported in the local compute engine"):
        # Feast's own materialization of one view, handed the declared object (the registry would lose its windows)
        store._get_provider().materialize_single_feature_view(
            store.config, view, datetime(2000, 1, 1, tzinfo=UTC), datetime.now(UTC), store.registry, store.project,
            lambda n: __import__("tqdm").tqdm(total=n, disable=True))


def test_the_registry_drops_aggregations_so_apply_refuses_them(prepared: Prepared, tmp_path: Path) -> None:
    from feast import BatchFeatureView, FeatureView

    root, features = _copy(prepared, tmp_path)
    view = next(v for v in load_repo(features, root).feature_views if v.name == "user_amount_windowed")
    stored = FeatureView.from_proto(view.to_proto())  # what Feast's registry hands back
    assert not getattr(stored, "aggregations", None)
    assert not isinstance(stored, BatchFeatureView) or not stored.aggregations
    with pytest.raises(FeatureStoreError, match=r"feature_repo/windowed\.py: 'user_amount_windowed': Aggregation\("
                                                r"sum\('amount'\), time_window=datetime\.timedelta\(seconds=3600\)\): "
                                                r"Feast 0\.67 does not store"):
        apply_repo(features, root)
    assert "user_amount_windowed" not in [v.name for v in open_store(features, root).list_feature_views()]
