"""The prediction-log store: hive layout by model / version / hour, window reads that open only the window's
parts, retention, URIs (local folder, ``file://``, a non-local fsspec filesystem)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from mlops_serving import (
    PredictionLogError,
    prune_prediction_log,
    read_prediction_log,
    resolve_prediction_log_uri,
    write_prediction_log,
)

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


def _row(i: int, ts: datetime, version: str = "3", **extra: Any) -> dict[str, Any]:
    return {"request_id": f"r{i}", "ts": ts, "model_name": "fraud", "model_version": version, "variant": "stable",
            "transaction_id": f"t{i}", "score": i / 100, "degraded": False, "latency_ms": 1.0, **extra}


def _hourly(store: Path | str, hours: int = 5, per_hour: int = 4, version: str = "3") -> list[dict[str, Any]]:
    """``per_hour`` rows in each of ``hours`` hours from 08:00, 10 minutes apart, one part per hour."""
    rows = [_row(h * 100 + k, T0 + timedelta(hours=h, minutes=10 * k), version) for h in range(hours)
            for k in range(per_hour)]
    for h in range(hours):
        write_prediction_log(store, "fraud", rows[h * per_hour:(h + 1) * per_hour])
    return rows


def test_parts_land_in_hive_partitions_by_model_version_and_hour(tmp_path: Path) -> None:
    write_prediction_log(tmp_path, "fraud", [_row(0, T0 + timedelta(minutes=59)), _row(1, T0 + timedelta(hours=1)),
                                             _row(2, T0, version="4")])
    parts = sorted(p.relative_to(tmp_path).parent.as_posix() for p in tmp_path.rglob("part-*.parquet"))
    assert parts == ["model=fraud/version=3/hour=2026-12-01T08", "model=fraud/version=3/hour=2026-12-01T09",
                     "model=fraud/version=4/hour=2026-12-01T08"]
    assert not list(tmp_path.rglob("*.tmp"))  # written under a temporary name, then renamed


def test_a_window_read_opens_only_the_parts_of_its_hours(tmp_path: Path) -> None:
    rows = _hourly(tmp_path)
    # every part outside 10:00-10:59 becomes garbage: a reader that opened one would fail
    for part in tmp_path.rglob("part-*.parquet"):
        if "hour=2026-12-01T10" not in part.as_posix():
            part.write_bytes(b"not parquet at all")
    since, until = T0 + timedelta(hours=2, minutes=5), T0 + timedelta(hours=2, minutes=30)
    frame = read_prediction_log(tmp_path, "fraud", since=since, until=until)
    want = [r["transaction_id"] for r in rows if since <= r["ts"] <= until]
    assert want == ["t201", "t202", "t203"]  # 10:10, 10:20, 10:30: both bounds inclusive
    assert frame["transaction_id"].tolist() == want
    with pytest.raises(PredictionLogError, match="cannot read the prediction log"):
        read_prediction_log(tmp_path, "fraud")  # the whole history does touch the garbage


def test_versions_and_columns_narrow_the_read(tmp_path: Path) -> None:
    _hourly(tmp_path, hours=2, version="3")
    _hourly(tmp_path, hours=2, version="4")
    for part in (tmp_path / "model=fraud" / "version=3").rglob("part-*.parquet"):
        part.write_bytes(b"garbage")  # version 3 is never opened when only 4 is asked for
    frame = read_prediction_log(tmp_path, "fraud", versions=[4], columns=["model_version", "score"])
    assert list(frame.columns) == ["model_version", "score"]
    assert frame["model_version"].tolist() == ["4"] * 8
    assert frame["score"].tolist() == [0.0, 0.01, 0.02, 0.03, 1.0, 1.01, 1.02, 1.03]
    with pytest.raises(PredictionLogError, match="unknown prediction-log column"):
        read_prediction_log(tmp_path, "fraud", versions=["4"], columns=["scroe"])


def test_rows_come_back_oldest_first_in_utc_and_naive_bounds_mean_utc(tmp_path: Path) -> None:
    late, early = T0 + timedelta(minutes=50), T0 + timedelta(minutes=5)
    write_prediction_log(tmp_path, "fraud", [_row(1, late)])
    write_prediction_log(tmp_path, "fraud", [_row(0, early)])
    frame = read_prediction_log(tmp_path, "fraud")
    assert frame["transaction_id"].tolist() == ["t0", "t1"]
    assert str(frame["ts"].dt.tz) == "UTC"
    naive = read_prediction_log(tmp_path, "fraud", since=datetime(2026, 12, 1, 8, 30))
    assert naive["transaction_id"].tolist() == ["t1"]
    assert read_prediction_log(tmp_path, "other").empty
    assert read_prediction_log(tmp_path, "fraud", since=T0 + timedelta(days=1)).empty


def test_parts_with_different_columns_are_unified(tmp_path: Path) -> None:
    write_prediction_log(tmp_path, "fraud", [_row(0, T0, merchant_risk=None)])  # all-null column in this part
    write_prediction_log(tmp_path, "fraud", [_row(1, T0 + timedelta(minutes=1), merchant_risk=0.25, device="ios")])
    frame = read_prediction_log(tmp_path, "fraud")
    assert frame["merchant_risk"].tolist()[1] == 0.25 and pd.isna(frame["merchant_risk"].tolist()[0])
    assert frame["device"].tolist()[1] == "ios" and pd.isna(frame["device"].tolist()[0])


def test_a_dataframe_and_rows_with_different_keys_are_written_whole(tmp_path: Path) -> None:
    rows = [_row(0, T0), {**_row(1, T0 + timedelta(minutes=1)), "device": "web"}]  # 'device' only in row 2
    write_prediction_log(tmp_path, "fraud", rows)
    frame = read_prediction_log(tmp_path, "fraud")
    assert frame["device"].tolist()[1] == "web"
    write_prediction_log(tmp_path / "df", "fraud", frame)
    again = read_prediction_log(tmp_path / "df", "fraud")
    pd.testing.assert_frame_equal(again, frame)


def test_retention_deletes_whole_hours_that_ended_before_the_cutoff(tmp_path: Path) -> None:
    _hourly(tmp_path, hours=5)  # hours 08..12
    now = T0 + timedelta(hours=12, minutes=30)  # 20:30; cutoff 10h earlier: 10:30
    deleted = prune_prediction_log(tmp_path, "fraud", retention_hours=10, now=now)
    # 08:00-09:00 and 09:00-10:00 ended before 10:30; 10:00-11:00 still holds rows inside the retention
    assert [d.rsplit("/", 1)[-1] for d in deleted] == ["hour=2026-12-01T08", "hour=2026-12-01T09"]
    left = read_prediction_log(tmp_path, "fraud")
    assert sorted({t.strftime("%H") for t in left["ts"]}) == ["10", "11", "12"]
    assert prune_prediction_log(tmp_path, "fraud", retention_hours=10, now=now) == []  # idempotent
    with pytest.raises(PredictionLogError, match="must be positive"):
        prune_prediction_log(tmp_path, "fraud", retention_hours=0)


def test_non_local_filesystems_and_file_uris_work_the_same(tmp_path: Path) -> None:
    import fsspec

    uri = "memory://mlops-test-prediction-log"
    try:
        _hourly(uri, hours=2)  # an object-store-like filesystem: one put per part, no rename
        frame = read_prediction_log(uri, "fraud", since=T0 + timedelta(hours=1))
        assert frame["transaction_id"].tolist() == ["t100", "t101", "t102", "t103"]
    finally:
        fsspec.filesystem("memory").rm("/mlops-test-prediction-log", recursive=True)
    _hourly(tmp_path, hours=1)
    assert len(read_prediction_log(tmp_path.as_uri(), "fraud")) == 4


def test_uri_resolution_and_bad_names(tmp_path: Path) -> None:
    assert resolve_prediction_log_uri(".mlops/prediction_log", tmp_path) == str(tmp_path / ".mlops/prediction_log")
    assert resolve_prediction_log_uri("/abs/log", tmp_path) == "/abs/log"
    assert resolve_prediction_log_uri("file:///abs/log", tmp_path) == "/abs/log"
    assert resolve_prediction_log_uri("s3://bucket/log/staging", tmp_path) == "s3://bucket/log/staging"
    with pytest.raises(PredictionLogError, match="'a/b'"):
        write_prediction_log(tmp_path, "fraud", [_row(0, T0, version="a/b")])
    with pytest.raises(PredictionLogError, match="datetime 'ts'"):
        write_prediction_log(tmp_path, "fraud", [{"model_version": "1", "ts": "yesterday"}])


def test_parts_in_the_old_flat_layout_are_refused_with_the_way_out(tmp_path: Path) -> None:
    (tmp_path / "fraud").mkdir()
    pd.DataFrame([_row(0, T0)]).to_parquet(tmp_path / "fraud" / "part-old.parquet")
    with pytest.raises(PredictionLogError, match="old flat layout"):
        read_prediction_log(tmp_path, "fraud")
