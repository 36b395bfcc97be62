"""The DuckDB drift path equals the in-memory one: statistics to 1e-9, the same verdicts, the same errors.

The in-memory path (``drift.compare``) is the reference; scipy and hand-built counts pin the edge cases
independently of both.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from pydantic import ValidationError
from scipy import stats

from mlops_config import MonitoringConfig
from mlops_core import build_reference_profile
from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)
from mlops_monitoring import MonitoringError
from mlops_monitoring.drift import compare
from mlops_monitoring.drift_duckdb import DuckDBDrift, TableSource, compare_duckdb
from mlops_monitoring.window_duckdb import assess_window
from mlops_serving import write_prediction_log

STATS = ("statistic", "p_value", "psi", "effect_size")
FACTS = ("method", "drifted", "severity", "kind", "n_reference", "n_current", "missing_reference",
         "missing_current")


def _frame(rng: np.random.Generator, n: int, shift: float) -> pd.DataFrame:
    df = pd.DataFrame({
        "amount": rng.lognormal(3.0 + shift, 1.0, n),
        "user_txn_count_1h": rng.poisson(2.0 + 3 * shift, n).astype("int64"),  # ties: edges on data values
        "hour": rng.integers(0, 24, n).astype("int64"),
        "country": rng.choice(["DE", "FR", "NL"] + (["BR", "IN"] if shift else []), n),  # unseen categories
        "is_new_device": rng.random(n) < 0.2 + shift / 5,
        "score": np.clip(rng.beta(1, 8, n) + shift / 4, 0, 1),
    })
    df.loc[rng.random(n) < 0.04, "amount"] = np.nan
    df.loc[rng.random(n) < 0.03, "country"] = None
    return df


def _assert_same(expected: dict, got: dict) -> None:
    assert expected["level"] == got["level"]
    assert expected["reasons"] == got["reasons"]
    assert set(expected["columns"]) == set(got["columns"])
    for name, col in expected["columns"].items():
        other = got["columns"][name]
        for key in FACTS:
            assert col[key] == other[key], (name, key, col[key], other[key])
        for key in STATS:
            assert math.isclose(col[key], other[key], rel_tol=1e-9, abs_tol=1e-9), (name, key, col[key], other[key])


def _parquet(frame: pd.DataFrame, path: Path) -> TableSource:
    frame.to_parquet(path)
    return TableSource((str(path),))


@pytest.mark.parametrize(("n_ref", "n_cur", "shift"), [(800, 500, 0.0), (800, 500, 0.4), (30_000, 12_000, 0.3)])
def test_same_statistics_and_verdicts_as_in_memory(tmp_path: Path, n_ref: int, n_cur: int, shift: float) -> None:
    # small sizes take scipy's exact KS p-value, 30k / 12k its asymptotic one: both paths of ks_2samp's "auto"
    rng = np.random.default_rng(7)
    ref, cur = _frame(rng, n_ref, 0.0), _frame(rng, n_cur, shift)
    expected = compare(ref, cur).to_dict()
    got = compare_duckdb(_parquet(ref, tmp_path / "ref.parquet"), _parquet(cur, tmp_path / "cur.parquet")).to_dict()
    _assert_same(expected, got)
    assert set(got["columns"]) == {"amount", "user_txn_count_1h", "hour", "country", "is_new_device", "score"}
    if shift:
        assert got["columns"]["country"]["drifted"] and got["level"] != "OK"


def test_against_a_profile_same_as_in_memory(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    ref, cur = _frame(rng, 20_000, 0.0), _frame(rng, 15_000, 0.3)
    profile = build_reference_profile(ref, ["amount", "user_txn_count_1h", "hour"], ["country", "is_new_device"],
                                      scores=ref["score"], max_categories=2)  # rare categories merged into other
    expected = compare(profile, cur).to_dict()
    got = compare_duckdb(profile, _parquet(cur, tmp_path / "cur.parquet")).to_dict()
    _assert_same(expected, got)
    assert got["columns"]["amount"]["method"] == "ks_sketch"


def test_ks_equals_scipy_and_psi_the_hand_count(tmp_path: Path) -> None:
    # reference 0..99 (10 bins: edges 9.9, 19.8, ...); current all below 10 plus NaNs: 9 empty bins, floored
    ref = pd.DataFrame({"x": np.arange(100, dtype=np.float64)})
    cur = pd.DataFrame({"x": [0.5, 1.5, 2.5, 3.0, 9.0, np.nan, np.nan]})
    got = compare_duckdb(_parquet(ref, tmp_path / "r.parquet"), _parquet(cur, tmp_path / "c.parquet"),
                         score=None).columns["x"]
    ks = stats.ks_2samp(np.arange(100.0), [0.5, 1.5, 2.5, 3.0, 9.0])
    assert got.statistic == pytest.approx(ks.statistic, abs=1e-12)
    assert got.p_value == pytest.approx(ks.pvalue, abs=1e-12)
    # bins: 10 of 100 reference rows each + a missing bucket (0 vs 2 of 7); current: 5 of 7 in bin 0
    ref_share = np.array([0.1] * 10 + [1e-4])
    cur_share = np.array([5 / 7] + [1e-4] * 9 + [2 / 7])
    assert got.psi == pytest.approx(float(np.sum((cur_share - ref_share) * np.log(cur_share / ref_share))), rel=1e-12)
    assert (got.missing_reference, got.missing_current, got.n_current) == (0, 2, 5)


def test_chi2_over_unseen_categories_equals_scipy(tmp_path: Path) -> None:
    ref = pd.DataFrame({"c": ["a"] * 60 + ["b"] * 40})
    cur = pd.DataFrame({"c": ["a"] * 30 + ["b"] * 30 + ["z"] * 20 + [None] * 5})
    got = compare_duckdb(_parquet(ref, tmp_path / "r.parquet"), _parquet(cur, tmp_path / "c.parquet"),
                         score=None).columns["c"]
    expected = stats.chi2_contingency(np.array([[60, 40, 0, 0], [30, 30, 20, 5]]))
    assert got.statistic == pytest.approx(expected.statistic, rel=1e-12)
    assert got.p_value == pytest.approx(expected.pvalue, rel=1e-9)
    assert got.drifted


def test_window_of_the_prediction_log_bounds_and_degraded_rows(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    rows = _frame(rng, 3000, 0.3).drop(columns=["is_new_device"])
    rows["ts"] = [now - timedelta(minutes=int(m)) for m in rng.integers(0, 180, len(rows))]  # 3 h, the window 1 h
    rows["degraded"] = rng.random(len(rows)) < 0.05
    rows["model_version"], rows["request_id"] = "3", [f"r{i}" for i in range(len(rows))]
    write_prediction_log(tmp_path / "log", "fraud", rows)
    ref = _frame(rng, 5000, 0.0).drop(columns=["is_new_device"])
    since = now - timedelta(hours=1)
    from mlops_serving import prediction_log_parts

    parts, fs = prediction_log_parts(tmp_path / "log", "fraud", since=since, until=now)
    assert fs is None and parts
    info: dict = {"source": "log", "window": "1h"}
    done = assess_window(MonitoringConfig(), TableSource.from_path(_write(ref, tmp_path / "ref.parquet"), "ref"),
                         TableSource(tuple(parts), since=since, until=now, drop_degraded=True), info,
                         contract=FRAUD_CONTRACT)
    in_window = rows[(rows["ts"] >= since) & (rows["ts"] <= now)]
    assert info["degraded_rows_excluded"] == int(in_window["degraded"].sum())
    kept = in_window[~in_window["degraded"]].reset_index(drop=True)
    expected = compare(ref, kept[list(ref.columns)]).to_dict()
    _assert_same(expected, done.report.to_dict())


def test_nan_stored_as_nan_not_null_counts_as_missing(tmp_path: Path) -> None:
    # pyarrow keeps float NaN as NaN (pandas.to_parquet writes null); parquet's min/max statistics skip NaN,
    # which once let DuckDB drop a `NOT isnan(x)` filter and feed NaN to KS
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(5)
    ref = rng.normal(0, 1, 3000)
    cur = np.where(rng.random(2000) < 0.1, np.nan, rng.normal(0.2, 1, 2000))
    pq.write_table(pa.table({"x": ref}), tmp_path / "r.parquet")
    pq.write_table(pa.table({"x": pa.array(cur, from_pandas=False)}), tmp_path / "c.parquet")
    got = compare_duckdb(TableSource((str(tmp_path / "r.parquet"),)), TableSource((str(tmp_path / "c.parquet"),)),
                         score=None).columns["x"]
    valid = cur[~np.isnan(cur)]
    assert got.missing_current == int(np.isnan(cur).sum()) and got.n_current == valid.size
    assert got.statistic == pytest.approx(stats.ks_2samp(ref, valid).statistic, abs=1e-12)


def _write(frame: pd.DataFrame, path: Path) -> Path:
    frame.to_parquet(path)
    return path


def test_errors_name_the_bad_input(tmp_path: Path) -> None:
    ref = _parquet(pd.DataFrame({"x": [1.0, 2.0, np.inf], "c": ["a", "b", "c"]}), tmp_path / "r.parquet")
    cur = _parquet(pd.DataFrame({"x": [1.0, 2.0, 3.0], "c": ["a", "b", "b"]}), tmp_path / "c.parquet")
    with pytest.raises(MonitoringError, match="'x' holds an infinite value"):
        compare_duckdb(ref, cur, numeric=["x"], categorical=[])
    with pytest.raises(MonitoringError, match=r"columns \['nope'\] are not in the reference"):
        compare_duckdb(ref, cur, numeric=["nope"])
    with pytest.raises(MonitoringError, match="'c' has type VARCHAR; expected a numeric column"):
        compare_duckdb(ref, cur, numeric=["c"], categorical=[])
    empty = _parquet(pd.DataFrame({"x": [np.nan, np.nan], "c": ["a", "b"]}), tmp_path / "e.parquet")
    with pytest.raises(MonitoringError, match="no non-missing value in the current data"):
        compare_duckdb(cur, empty, numeric=["x"], categorical=[])
    with pytest.raises(MonitoringError, match="does not exist"):
        TableSource.from_path(tmp_path / "missing.parquet", "reference")


def test_engine_config_and_memory_limit_applied(tmp_path: Path) -> None:
    assert MonitoringConfig().engine == "duckdb"
    with pytest.raises(ValidationError, match="engine"):
        MonitoringConfig(engine="flink")
    with pytest.raises(ValidationError, match="duckdb_memory_limit"):
        MonitoringConfig(duckdb_memory_limit="lots")
    cfg = MonitoringConfig(duckdb_memory_limit="256MB", duckdb_threads=1, duckdb_temp_dir=str(tmp_path))
    with DuckDBDrift(cfg) as eng:
        limit, threads, temp = eng.sql("SELECT current_setting('memory_limit'), current_setting('threads'), "
                                       "current_setting('temp_directory')")[0]
    assert limit in ("256.0 MB", "244.1 MiB") and int(threads) == 1 and temp == str(tmp_path)


def test_the_engines_are_siblings_behind_one_protocol() -> None:
    """Spark is a second implementation of the engine's building blocks, not a DuckDB engine overriding them."""
    from mlops_monitoring.drift_engine import DriftEngine
    from mlops_monitoring.drift_spark import SparkDrift

    assert not issubclass(SparkDrift, DuckDBDrift)
    blocks = [n for n in vars(DriftEngine) if not n.startswith("_") and callable(getattr(DriftEngine, n))]
    assert {"sql", "view", "count", "numeric_counts", "reference_edges", "ks_exact", "ks_sketch",
            "category_counts", "sample", "close"} <= set(blocks)
    for engine in (DuckDBDrift, SparkDrift):
        missing = [n for n in blocks if n not in vars(engine)]
        assert not missing, f"{engine.__name__} does not implement {missing}"
