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
from mlops_features.repo import in_repo
from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)
from tests.support import sample_as_of

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, FeaturesConfig, FeaturesConfig]]:
    if shutil.which("java") is None:
        pytest.fail("java is not installed; Spark needs a JVM: run `make java`")
    root = tmp_path_factory.mktemp("spark-engine")
    shutil.copytree(REPO_ROOT / "feature_repo", root / "feature_repo")
    common = {"feature_service": "fraud_v1",
              "online_store": "redis", "redis_url": "redis://127.0.0.1:6379/0", "online_ttl_as_of": sample_as_of()}
    local = FeaturesConfig(**common, feast_project=f"t_{uuid.uuid4().hex[:10]}", registry=".mlops/feast/local.db")
    spark = FeaturesConfig(**common, feast_project=f"t_{uuid.uuid4().hex[:10]}", registry=".mlops/feast/spark.db",
                           batch_engine="spark", spark_master="local[2]", spark_partitions=3)
    # generate, validate, ingest, apply and materialize with the local engine; then the same tables via Spark
    prepare_local_data(DataConfig(rows=2_000, days=2, users=120, merchants=30), local, root,
                       contract=FRAUD_CONTRACT, seed=11)
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


def test_the_engine_ran_on_the_configured_master_with_the_platforms_settings(engines: tuple) -> None:
    """Feast's engine hands its whole batch_engine block to SparkConf (its keys are not Spark's), so on its own
    it ran on Spark's default local[*] with a 1 GB driver whatever the config said: the session it used must
    carry features.spark_master and SPARK_DEFAULTS under features.spark_conf."""
    from pyspark.sql import SparkSession

    _, _, spark_cfg = engines
    session = SparkSession.getActiveSession()
    assert session is not None
    conf = session.sparkContext.getConf()
    assert conf.get("spark.master") == "local[2]"  # the section's, not Spark's default local[*]
    assert conf.get("spark.driver.memory") == "4g"  # mlops_config.SPARK_DEFAULTS
    assert conf.get("spark.sql.session.timeZone") == "UTC"
    assert session.conf.get("spark.sql.shuffle.partitions") == "8"
    assert conf.get("spark.app.name") == f"mlops-materialize-{spark_cfg.feast_project}"


def test_spark_engine_reads_the_source_on_the_executors_with_the_duckdb_stores_rows(engines: tuple) -> None:
    """The Spark engine's source pull is a Spark plan over the parquet (executors scan it; no arrow table built on
    the driver and handed to ``createDataFrame``) and returns the DuckDB store's rows for the same window, both
    bounds inclusive."""
    from datetime import timedelta

    from feast.infra.offline_stores.contrib.spark_offline_store.spark import SparkRetrievalJob

    root, local, spark = engines
    spark_store, local_store = open_store(spark, root), open_store(local, root)
    offline, duck = spark_store._get_provider().offline_store, local_store._get_provider().offline_store
    assert (type(offline).__name__, type(duck).__name__) == ("SparkReadOfflineStore", "UdfDuckDBOfflineStore")
    source = spark_store.get_feature_view("user_transactions").batch_source
    tx = pd.read_parquet(root / local.source_dir / "transactions.parquet")
    stamps = pd.to_datetime(tx["event_timestamp"], utc=True).sort_values()
    start, end = stamps.iloc[100].to_pydatetime(), stamps.iloc[-100].to_pydatetime()  # rows sit on both bounds
    args = (["user_id"], [], "event_timestamp", "created", start, end)
    job = offline.pull_all_from_table_or_query(spark_store.config, source, *args)
    assert isinstance(job, SparkRetrievalJob)
    plan = job.to_spark_df()._jdf.queryExecution().optimizedPlan().toString()
    assert "parquet" in plan.lower() and "LocalRelation" not in plan and "LogicalRDD" not in plan, plan
    got = job.to_spark_df().toPandas().sort_values("transaction_id").reset_index(drop=True)
    with in_repo(local, root):  # the DuckDB store reads a relative path from the working directory, as in materialize
        expected = duck.pull_all_from_table_or_query(local_store.config, source, *args).to_df()
    expected = expected.sort_values("transaction_id").reset_index(drop=True)
    inside = ((stamps >= start) & (stamps <= end)).sum()
    assert len(got) == len(expected) == inside > 1000
    assert sorted(got.columns) == sorted(expected.columns) == sorted(tx.columns)
    for col in ("transaction_id", "user_id", "merchant_id", "amount", "is_fraud"):
        assert got[col].tolist() == expected[col].tolist(), col
    for col in ("event_timestamp", "created"):
        assert (pd.to_datetime(got[col]).dt.tz_localize("UTC") == pd.to_datetime(expected[col], utc=True)).all(), col
    assert got["event_timestamp"].min() == start.replace(tzinfo=None) and \
        got["event_timestamp"].max() == end.replace(tzinfo=None) and start + timedelta(hours=1) < end


def test_spark_udfs_run_per_entity_group_on_the_workers_not_the_driver(engines: tuple) -> None:
    """Under Spark the udfs return a lazy ``applyInPandas`` plan (the rows stay on the workers) whose rows equal
    the pandas udf's on the same transactions, whatever the number of groups."""
    import importlib.util

    from pyspark.sql import SparkSession

    root, local, _ = engines
    spec = importlib.util.spec_from_file_location("bench_windows", root / "feature_repo" / "windows.py")
    assert spec is not None and spec.loader is not None
    windows = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(windows)
    tx = pd.read_parquet(root / local.source_dir / "transactions.parquet")
    spark = SparkSession.builder.getOrCreate()  # the engine's session (local[2], UTC)
    spark.conf.set("spark.sql.shuffle.partitions", "3")
    frame = spark.createDataFrame(tx)
    for udf, key in ((windows.user_windows_udf, "user_id"), (windows.merchant_risk_udf, "merchant_id")):
        out = udf(frame)
        assert "FlatMapGroupsInPandas" in out._jdf.queryExecution().logical().toString()
        expected = udf(tx.copy())
        got = out.toPandas()
        order = [key, "event_timestamp"]
        expected = expected.assign(event_timestamp=pd.to_datetime(expected["event_timestamp"], utc=True),
                                   created=pd.to_datetime(expected["created"], utc=True))
        got = got.assign(event_timestamp=pd.to_datetime(got["event_timestamp"]).dt.tz_localize("UTC"),
                         created=pd.to_datetime(got["created"]).dt.tz_localize("UTC"))
        assert len(got) == len(expected) > 50
        pd.testing.assert_frame_equal(expected.sort_values(order).reset_index(drop=True)[got.columns],
                                      got.sort_values(order).reset_index(drop=True), check_exact=True,
                                      check_dtype=False)
