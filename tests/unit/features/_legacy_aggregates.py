"""Reference only: ``mlops_features.aggregates`` as of fb218c9, the pandas code feature_repo/ replaced
(tests/unit/features/test_feature_repo.py compares the two). Verbatim but for ``USER_FEATURES``, which the
model contract no longer lists.

The ingestion step: windowed user aggregates and merchant risk, computed from validated transactions.

User rows (``user_transactions``): one per transaction, stamped at its event time, describing the user
*after* that transaction: counts and amount sums over the last 1 h / 24 h / 7 d (window ``[t - w, t]``),
the 7-day mean and standard deviation of amounts, the z-score of this transaction's amount against the
user's previous 7 days, and distinct merchants in 24 h. The training set joins these strictly before a
transaction's own time, which is exactly what the online store holds when that transaction arrives.

Merchant rows (``merchant_risk``): one per merchant and day, stamped at the end of the day (00:00 UTC
of the next day), from the labelled transactions of the 7 days up to then: a smoothed fraud rate,
the transaction count of that day and the average amount. Labels of a day are used only after it ends.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd

from mlops_features.errors import DataError

USER_FEATURES = ("user_txn_count_1h", "user_txn_count_24h", "user_txn_count_7d", "user_amount_sum_1h",
                 "user_amount_sum_24h", "user_amount_sum_7d", "user_amount_mean_7d", "user_amount_std_7d",
                 "user_amount_zscore", "user_distinct_merchants_24h")

logger = logging.getLogger(__name__)

PRIOR_WEIGHT = 20.0
"""Pseudo-transactions at the global base rate that smooth a merchant's fraud rate."""

_WINDOWS = {"1h": pd.Timedelta(hours=1), "24h": pd.Timedelta(hours=24), "7d": pd.Timedelta(days=7)}
_NEEDED = ("transaction_id", "user_id", "merchant_id", "event_timestamp", "amount", "is_fraud")


def compute_user_features(tx: pd.DataFrame) -> pd.DataFrame:
    """User aggregates per transaction (see module doc); columns ``user_id, event_timestamp, created`` + features."""
    _require(tx, _NEEDED)
    df = tx.sort_values(["user_id", "event_timestamp", "transaction_id"], kind="stable").reset_index(drop=True)
    codes, _ = pd.factorize(df["user_id"], sort=True)
    t = df["event_timestamp"].dt.as_unit("us").astype("int64").to_numpy()
    key = codes.astype(np.int64) * (1 << 52) + (t - t.min())
    amount = df["amount"].to_numpy(dtype=np.float64)
    # Whole cents in int64 keep window sums exact (differences of wrapped cumsums are still exact).
    cents = np.round(amount * 100).astype(np.int64)
    pos = np.arange(len(df))
    csum = np.concatenate([[0], np.cumsum(cents)])
    csq = np.concatenate([[0], np.cumsum(cents * cents)])
    out: dict[str, np.ndarray] = {}
    first = {}
    for name, width in _WINDOWS.items():
        first[name] = np.searchsorted(key, key - width.value // 1000, side="left")
        n = pos - first[name] + 1
        out[f"user_txn_count_{name}"] = n.astype(np.int64)
        out[f"user_amount_sum_{name}"] = (csum[pos + 1] - csum[first[name]]) / 100.0
    n7 = out["user_txn_count_7d"]
    mean7, std7 = _mean_std(csum[pos + 1] - csum[first["7d"]], csq[pos + 1] - csq[first["7d"]], n7)
    out["user_amount_mean_7d"] = mean7
    out["user_amount_std_7d"] = std7
    # z-score of this amount against the user's previous transactions in the 7 days before it.
    prev_n = n7 - 1
    prev_mean, prev_std = _mean_std(csum[pos] - csum[first["7d"]], csq[pos] - csq[first["7d"]], prev_n)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = (amount - prev_mean) / prev_std
    out["user_amount_zscore"] = np.where((prev_n >= 2) & (prev_std > 1e-9), np.clip(z, -50.0, 50.0), 0.0)
    merchants = pd.factorize(df["merchant_id"])[0]
    start24 = first["24h"]
    out["user_distinct_merchants_24h"] = np.fromiter(
        (len(set(merchants[s : i + 1].tolist())) for i, s in enumerate(start24)), dtype=np.int64, count=len(df)
    )
    feats = pd.DataFrame({"user_id": df["user_id"], "event_timestamp": df["event_timestamp"]})
    feats["created"] = df["created"] if "created" in df else df["event_timestamp"]
    for name in USER_FEATURES:
        feats[name] = out[name]
    return feats


def compute_merchant_features(tx: pd.DataFrame) -> pd.DataFrame:
    """Merchant risk per merchant and day, stamped at the day's end (see module doc)."""
    _require(tx, _NEEDED)
    day = tx["event_timestamp"].dt.floor("D")
    daily = (
        tx.assign(day=day)
        .groupby(["merchant_id", "day"], sort=True)
        .agg(n=("amount", "size"), fraud=("is_fraud", "sum"), amount=("amount", "sum"))
        .reset_index()
    )
    days = pd.date_range(day.min(), day.max(), freq="D")
    grid = pd.MultiIndex.from_product([sorted(daily["merchant_id"].unique()), days], names=["merchant_id", "day"])
    full = daily.set_index(["merchant_id", "day"]).reindex(grid, fill_value=0).reset_index()
    grouped = full.groupby("merchant_id", sort=False)
    roll = {c: grouped[c].transform(lambda s: s.rolling(7, min_periods=1).sum()) for c in ("n", "fraud", "amount")}
    base_rate = float(tx["is_fraud"].mean()) if len(tx) else 0.0
    feats = pd.DataFrame(
        {
            "merchant_id": full["merchant_id"],
            "event_timestamp": full["day"] + pd.Timedelta(days=1),
            "merchant_fraud_rate_7d": (roll["fraud"] + PRIOR_WEIGHT * base_rate) / (roll["n"] + PRIOR_WEIGHT),
            "merchant_txn_count_1d": full["n"].astype(np.int64),
            "merchant_amount_mean_7d": np.where(roll["n"] > 0, roll["amount"] / roll["n"].clip(lower=1), 0.0),
        }
    )
    feats["created"] = feats["event_timestamp"]
    seen = roll["n"] > 0
    return feats[seen.to_numpy()].reset_index(drop=True)


def read_validated(validated_dir: str | Path) -> pd.DataFrame:
    """All accepted rows under ``validated_dir`` as one DataFrame, sorted by event time."""
    files = sorted(Path(validated_dir).glob("*.parquet"))
    if not files:
        raise DataError(
            f"no validated batches in {str(validated_dir)!r}: run `mlops data generate` and `mlops data validate` first"
        )
    df = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
    return df.sort_values(["event_timestamp", "transaction_id"], kind="stable").reset_index(drop=True)


def ingest(validated_dir: str | Path, source_dir: str | Path) -> dict[str, int]:
    """Compute both feature tables from the validated area and write them as the Feast sources' parquet files.

    Returns:
        Rows written per table, e.g. ``{"user_transactions": 60000, "merchant_risk": 900}``.
    """
    tx = read_validated(validated_dir)
    out = Path(source_dir)
    out.mkdir(parents=True, exist_ok=True)
    tables = {"user_transactions": compute_user_features(tx), "merchant_risk": compute_merchant_features(tx)}
    for name, table in tables.items():
        tmp = out / f".{name}.parquet.tmp"
        table.to_parquet(tmp, index=False)
        tmp.replace(out / f"{name}.parquet")
    logger.info("ingested %d transactions into %s", len(tx), out)
    return {name: len(t) for name, t in tables.items()}


def _mean_std(sum_c: np.ndarray, sumsq_c: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and sample standard deviation (in currency units) from exact cent sums; 0 where n < 1 (std: n < 2)."""
    safe = np.maximum(n, 1)
    mean_c = sum_c / safe
    var_c = np.maximum(sumsq_c / safe - mean_c**2, 0.0) * safe / np.maximum(safe - 1, 1)
    std = np.where(n >= 2, np.sqrt(var_c) / 100.0, 0.0)
    return np.where(n >= 1, mean_c / 100.0, 0.0), std


def _require(df: pd.DataFrame, cols: tuple[str, ...]) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise DataError(f"transactions lack columns {missing!r}; expected at least {list(cols)}")
