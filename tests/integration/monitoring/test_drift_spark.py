"""``monitoring.engine: spark``: the drift statistics as Spark SQL (one ``local[2]`` session for the module, a real
JVM) equal the in-memory path (``drift.compare``, numpy/scipy) and the DuckDB path to 1e-9, with the same
verdicts, on the DuckDB tests' shared data: exact and asymptotic KS, ties, NaN stored as NaN and as null,
unseen categories, a profile reference (the ECDF sketch), the prediction log's window and degraded rows.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from mlops_config import MonitoringConfig
from mlops_core import build_reference_profile
from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)
from mlops_monitoring import MonitoringError
from mlops_monitoring.drift import compare
from mlops_monitoring.drift_duckdb import TableSource, compare_duckdb
from mlops_monitoring.drift_spark import SparkDrift, compare_spark
from mlops_monitoring.window_duckdb import assess_window
from mlops_serving import prediction_log_parts, write_prediction_log


def _shared() -> Any:
    """The DuckDB tests' data and comparison (``_frame``, ``_assert_same``, ``_parquet``): the same, not a copy."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "unit" / "monitoring" / "test_drift_duckdb.py"
    spec = importlib.util.spec_from_file_location("drift_duckdb_shared", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_SHARED = _shared()
_assert_same, _frame, _parquet = _SHARED._assert_same, _SHARED._frame, _SHARED._parquet

pytestmark = pytest.mark.integration

SPARK = MonitoringConfig(engine="spark", spark_master="local[2]",
                         spark_conf={"spark.driver.memory": "1g", "spark.sql.shuffle.partitions": "2",
                                     # the catalog's (empty) warehouse folder, not in the working directory
                                     "spark.sql.warehouse.dir": str(Path(tempfile.gettempdir()) / "drift-spark-wh")})


@pytest.fixture(scope="module")
def session() -> Iterator[Any]:
    if shutil.which("java") is None:
        pytest.fail("java is not installed; Spark needs a JVM: run `make java`")
    eng = SparkDrift(SPARK)  # the engine builds the session from monitoring's Spark settings
    assert eng.spark.conf.get("spark.sql.session.timeZone") == "UTC"
    yield eng.spark
    eng.spark.stop()


@pytest.mark.parametrize(("n_ref", "n_cur", "shift"), [(800, 500, 0.4), (30_000, 12_000, 0.3)])
def test_same_statistics_and_verdicts_as_in_memory_and_duckdb(session: Any, tmp_path: Path, n_ref: int, n_cur: int,
                                                              shift: float) -> None:
    rng = np.random.default_rng(7)  # 800/500: scipy's exact KS p-value; 30k/12k: the ECDF window in Spark SQL
    ref, cur = _frame(rng, n_ref, 0.0), _frame(rng, n_cur, shift)
    ref_src, cur_src = _parquet(ref, tmp_path / "ref.parquet"), _parquet(cur, tmp_path / "cur.parquet")
    got = compare_spark(ref_src, cur_src, SPARK, session=session).to_dict()
    _assert_same(compare(ref, cur).to_dict(), got)
    _assert_same(compare_duckdb(ref_src, cur_src).to_dict(), got)
    assert set(got["columns"]) == {"amount", "user_txn_count_1h", "hour", "country", "is_new_device", "score"}
    assert got["columns"]["country"]["drifted"] and got["level"] != "OK"


def test_against_a_profile_and_nan_not_null(session: Any, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(11)
    ref, cur = _frame(rng, 20_000, 0.0), _frame(rng, 15_000, 0.3)
    profile = build_reference_profile(ref, ["amount", "user_txn_count_1h", "hour"], ["country", "is_new_device"],
                                      scores=ref["score"], max_categories=2)
    # amount's missing values written as NaN (pyarrow keeps them), not null: Spark's isnan(NULL) is false
    table = pa.Table.from_pandas(cur, preserve_index=False)
    table = table.set_column(table.schema.get_field_index("amount"), "amount",
                             pa.array(cur["amount"].to_numpy(), from_pandas=False))
    pq.write_table(table, tmp_path / "cur.parquet")
    assert pq.read_table(tmp_path / "cur.parquet")["amount"].null_count == 0  # NaN, not null
    got = compare_spark(profile, TableSource((str(tmp_path / "cur.parquet"),)), SPARK, session=session).to_dict()
    _assert_same(compare(profile, cur).to_dict(), got)
    assert got["columns"]["amount"]["method"] == "ks_sketch"
    assert got["columns"]["amount"]["missing_current"] == int(cur["amount"].isna().sum()) > 0


def test_window_of_the_prediction_log_through_the_monitor_engine(session: Any, tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    rows = _frame(rng, 3000, 0.3).drop(columns=["is_new_device"])
    rows["ts"] = [now - timedelta(minutes=int(m)) for m in rng.integers(0, 180, len(rows))]
    rows["degraded"] = rng.random(len(rows)) < 0.05
    rows["model_version"], rows["request_id"] = "3", [f"r{i}" for i in range(len(rows))]
    write_prediction_log(tmp_path / "log", "fraud", rows)
    ref = _frame(rng, 5000, 0.0).drop(columns=["is_new_device"])
    since = now - timedelta(hours=1)
    parts, _ = prediction_log_parts(tmp_path / "log", "fraud", since=since, until=now)
    info: dict = {"source": "log", "window": "1h"}
    done = assess_window(SPARK, TableSource((str(_parquet(ref, tmp_path / "ref.parquet").paths[0]),)),
                         TableSource(tuple(parts), since=since, until=now, drop_degraded=True), info, sample_rows=50,
                         contract=FRAUD_CONTRACT)
    in_window = rows[(rows["ts"] >= since) & (rows["ts"] <= now)]
    assert info["degraded_rows_excluded"] == int(in_window["degraded"].sum()) > 0
    kept = in_window[~in_window["degraded"]].reset_index(drop=True)
    _assert_same(compare(ref, kept[list(ref.columns)]).to_dict(), done.report.to_dict())
    assert len(done.current_sample) == 50 and len(done.reference_sample) == 50
    bad = _parquet(pd.DataFrame({"x": [1.0, np.inf]}), tmp_path / "bad.parquet")
    with pytest.raises(MonitoringError, match="'x' holds an infinite value"):
        compare_spark(bad, bad, SPARK, session=session, numeric=["x"], categorical=[])
    with pytest.raises(MonitoringError, match=r"monitoring\.engine=spark reads parquet"):
        compare_spark(bad, TableSource((str(tmp_path / "c.csv"),), csv=True), SPARK, session=session)
