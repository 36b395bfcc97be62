"""The feature repo's window udfs (feature_repo/windows.py) against a brute-force count over hand-built and
random transactions."""

from __future__ import annotations

import importlib.util
import math
import statistics
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
PRIOR_WEIGHT = 20.0  # the merchant rate's smoothing, as feature_repo/windows.py documents it


def _load_windows() -> object:
    spec = importlib.util.spec_from_file_location("fraud_windows_under_test", REPO_ROOT / "feature_repo/windows.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_windows = _load_windows()
compute_user_features = _windows.user_windows_udf  # type: ignore[attr-defined]
compute_merchant_features = _windows.merchant_risk_udf  # type: ignore[attr-defined]

T0 = pd.Timestamp("2026-11-01 00:00", tz="UTC")


def _tx(rows: list[tuple[str, str, str, float, int]]) -> pd.DataFrame:
    """(user, merchant, offset like '90min', amount, is_fraud) → transactions."""
    return pd.DataFrame(
        {
            "transaction_id": [f"T{i}" for i in range(len(rows))],
            "user_id": [r[0] for r in rows],
            "merchant_id": [r[1] for r in rows],
            "event_timestamp": [T0 + pd.Timedelta(r[2]) for r in rows],
            "amount": [r[3] for r in rows],
            "is_fraud": [r[4] for r in rows],
        }
    )


def test_hand_built_user_windows() -> None:
    tx = _tx([
        ("U1", "M1", "0min", 10.0, 0),
        ("U1", "M2", "30min", 20.0, 0),
        ("U1", "M1", "60min", 30.0, 0),   # exactly 1 h after the first: the window [t-1h, t] includes it
        ("U1", "M3", "61min", 100.0, 1),  # the first is now 61 min old: out of the 1 h window
        ("U2", "M1", "10min", 5.0, 0),
        ("U1", "M1", "2d", 40.0, 0),      # 24 h window: alone; 7 d window: all five
    ])
    f = compute_user_features(tx).set_index(["user_id", "event_timestamp"]).sort_index()
    u1 = f.loc["U1"]
    assert u1["user_txn_count_1h"].tolist() == [1, 2, 3, 3, 1]
    assert u1["user_amount_sum_1h"].tolist() == [10.0, 30.0, 60.0, 150.0, 40.0]
    assert u1["user_txn_count_24h"].tolist() == [1, 2, 3, 4, 1]
    assert u1["user_txn_count_7d"].tolist() == [1, 2, 3, 4, 5]
    assert u1["user_distinct_merchants_24h"].tolist() == [1, 2, 2, 3, 1]
    assert u1["user_amount_mean_7d"].tolist() == pytest.approx([10, 15, 20, 40, 40])
    assert u1["user_amount_std_7d"].tolist() == pytest.approx(
        [0.0, statistics.stdev([10, 20]), statistics.stdev([10, 20, 30]), statistics.stdev([10, 20, 30, 100]),
         statistics.stdev([10, 20, 30, 100, 40])])
    # z-score against the previous transactions only: needs two of them.
    z = u1["user_amount_zscore"].tolist()
    assert z[:2] == [0.0, 0.0]
    assert z[2] == pytest.approx((30 - 15) / statistics.stdev([10, 20]))
    assert z[3] == pytest.approx((100 - 20) / statistics.stdev([10, 20, 30]))
    assert f.loc["U2"]["user_txn_count_1h"].tolist() == [1]


def test_windows_match_brute_force_on_random_data() -> None:
    rng = np.random.default_rng(0)
    n = 400
    tx = _tx([(f"U{rng.integers(0, 8)}", f"M{rng.integers(0, 5)}", f"{int(rng.integers(0, 9 * 24 * 60))}min",
               float(rng.integers(1, 100_000)) / 100, 0) for _ in range(n)])
    tx = tx.drop_duplicates(["user_id", "event_timestamp"])  # equal stamps of one user have no defined order
    f = compute_user_features(tx)
    merged = tx.merge(f, on=["user_id", "event_timestamp"])
    for row in merged.sample(80, random_state=1).itertuples():
        mine = tx[(tx.user_id == row.user_id) & (tx.event_timestamp <= row.event_timestamp)]
        for name, width in (("1h", pd.Timedelta(hours=1)), ("24h", pd.Timedelta(days=1)), ("7d", pd.Timedelta(days=7))):
            window = mine[mine.event_timestamp >= row.event_timestamp - width]
            assert getattr(row, f"user_txn_count_{name}") == len(window)
            assert getattr(row, f"user_amount_sum_{name}") == pytest.approx(window.amount.sum(), abs=1e-9)
        week = mine[mine.event_timestamp >= row.event_timestamp - pd.Timedelta(days=7)]
        assert row.user_amount_mean_7d == pytest.approx(week.amount.mean())
        expected_std = week.amount.std() if len(week) > 1 else 0.0
        assert row.user_amount_std_7d == pytest.approx(expected_std, abs=1e-9)
        day = mine[mine.event_timestamp >= row.event_timestamp - pd.Timedelta(days=1)]
        assert row.user_distinct_merchants_24h == day.merchant_id.nunique()
        prev = week[week.event_timestamp < row.event_timestamp].amount
        if len(prev) >= 2 and prev.std() > 0:
            assert row.user_amount_zscore == pytest.approx((row.amount - prev.mean()) / prev.std())
        else:
            assert row.user_amount_zscore == 0.0


def test_windows_stay_per_user_past_2048_users() -> None:
    # 3000 users over 30 days: a (user, µs) key of user * 2**52 overflowed int64 past 2048 users, so windows
    # spanned other users' rows; the counts here come from a per-user groupby, not from the udf's own key
    rng = np.random.default_rng(4)
    n = 9_000
    tx = pd.DataFrame({"transaction_id": [f"T{i}" for i in range(n)],
                       "user_id": [f"U{u:05d}" for u in rng.integers(0, 3_000, n)],
                       "merchant_id": [f"M{m}" for m in rng.integers(0, 40, n)],
                       "event_timestamp": T0 + pd.to_timedelta(rng.integers(0, 30 * 86_400, n), unit="s"),
                       "amount": rng.integers(100, 10_000, n) / 100, "is_fraud": 0})
    tx = tx.drop_duplicates(["user_id", "event_timestamp"]).reset_index(drop=True)
    f = compute_user_features(tx).set_index(["user_id", "event_timestamp"]).sort_index()
    assert f.index.get_level_values("user_id").nunique() > 2048
    for width, name in ((pd.Timedelta(hours=24), "24h"), (pd.Timedelta(days=7), "7d")):
        expected = {}
        for user, rows in tx.groupby("user_id"):
            stamps = rows["event_timestamp"].sort_values()
            for stamp in stamps:
                expected[(user, stamp)] = int(((stamps >= stamp - width) & (stamps <= stamp)).sum())
        got = f[f"user_txn_count_{name}"].to_dict()
        assert got == expected


def test_merchant_risk_uses_only_days_that_have_ended() -> None:
    tx = _tx([
        ("U1", "M1", "1h", 10.0, 1),
        ("U2", "M1", "2h", 30.0, 0),
        ("U1", "M2", "3h", 50.0, 0),
        ("U1", "M1", "1d 5h", 20.0, 0),
    ])
    base = tx["is_fraud"].mean()  # 0.25
    f = compute_merchant_features(tx).set_index(["merchant_id", "event_timestamp"])
    day1_end, day2_end = T0 + pd.Timedelta(days=1), T0 + pd.Timedelta(days=2)
    m1d1 = f.loc[("M1", day1_end)]
    assert m1d1["merchant_txn_count_1d"] == 2
    assert m1d1["merchant_fraud_rate_7d"] == pytest.approx((1 + PRIOR_WEIGHT * base) / (2 + PRIOR_WEIGHT))
    assert m1d1["merchant_amount_mean_7d"] == pytest.approx(20.0)
    m1d2 = f.loc[("M1", day2_end)]
    assert m1d2["merchant_txn_count_1d"] == 1
    assert m1d2["merchant_fraud_rate_7d"] == pytest.approx((1 + PRIOR_WEIGHT * base) / (3 + PRIOR_WEIGHT))
    assert m1d2["merchant_amount_mean_7d"] == pytest.approx(20.0)
    # No row is stamped before its day ended, so no label is visible before then.
    assert (f.index.get_level_values("event_timestamp") >= day1_end).all()
    assert math.isclose(f.loc[("M2", day2_end)]["merchant_txn_count_1d"], 0)
