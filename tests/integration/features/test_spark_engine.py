"""``features.batch_engine``: the same feature tables materialized by Feast's local engine and by its Spark
compute engine (Spark ``local[2]``, a real JVM) into the real Redis give identical online values.

Each engine writes under a Feast project of its own (Feast's Redis keys carry the project), so the two sets
of keys never meet each other or another test's; ``teardown`` deletes them.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from mlops_config import DataConfig, FeaturesConfig
from mlops_features import apply_repo, materialize, open_store, prepare_local_data

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, FeaturesConfig, FeaturesConfig]]:
    if shutil.which("java") is None:
        pytest.fail("java is not installed; Spark needs a JVM: run `make java`")
    root = tmp_path_factory.mktemp("spark-engine")
    shutil.copytree(REPO_ROOT / "feature_repo", root / "feature_repo")
    common = {"online_store": "redis", "redis_url": "redis://127.0.0.1:6379/0"}
    local = FeaturesConfig(**common, feast_project=f"t_{uuid.uuid4().hex[:10]}", registry=".mlops/feast/local.db")
    spark = FeaturesConfig(**common, feast_project=f"t_{uuid.uuid4().hex[:10]}", registry=".mlops/feast/spark.db",
                           batch_engine="spark", spark_master="local[2]", spark_partitions=3)
    # generate, validate, ingest, apply and materialize with the local engine; then the same tables via Spark
    prepare_local_data(DataConfig(rows=2_000, days=2, users=120, merchants=30), local, root, seed=11)
    apply_repo(spark, root)
    materialize(spark, root)
    yield root, local, spark
    for cfg in (local, spark):
        open_store(cfg, root).teardown()


def _online(cfg: FeaturesConfig, root: Path, view: str, key: str, ids: list[str]) -> pd.DataFrame:
    store = open_store(cfg, root)
    fv = store.get_feature_view(view)
    refs = [f"{view}:{f.name}" for f in fv.features]
    frame = store.get_online_features(refs, [{key: i} for i in ids]).to_df()
    return frame.sort_values(key).reset_index(drop=True)


def test_spark_engine_writes_the_same_online_values_as_local(engines: tuple) -> None:
    root, local, spark = engines
    assert type(open_store(spark, root)._get_provider().batch_engine).__name__ == "SparkComputeEngine"
    assert type(open_store(local, root)._get_provider().batch_engine).__name__ == "LocalComputeEngine"
    for view, key in (("user_transactions", "user_id"), ("merchant_risk", "merchant_id")):
        source = pd.read_parquet(root / local.source_dir / f"{view}.parquet")
        ids = sorted(source[key].unique())
        expected, got = _online(local, root, view, key, ids), _online(spark, root, view, key, ids)
        assert len(expected) == len(ids) > 20
        feature_cols = [c for c in expected.columns if c != key]
        assert expected[feature_cols].notna().all().all()  # every entity materialized, not just defaults
        pd.testing.assert_frame_equal(expected, got, check_exact=True)
        # and the value is each entity's latest row (an independent check of both engines)
        latest = source.sort_values("event_timestamp").groupby(key).tail(1).set_index(key)
        col = feature_cols[0]
        assert got.set_index(key)[col].to_dict() == pytest.approx(latest[col].to_dict())
