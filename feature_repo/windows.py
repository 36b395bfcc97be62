"""Transformations of the fraud feature views: validated transactions in, one feature row per event out.

Each function is a BatchFeatureView ``udf`` (``mode="pandas"``): Feast's compute engine calls it when it
materializes the online store, the platform calls the same function over the full history for the offline
table that training sets join. They are self-contained (imports inside, no module globals): Feast stores
their source text in the registry (``udf_string``) and rebuilds them from it, so a process that reads the
registry (serving, the materialization job) needs no copy of this folder; ``definitions.py`` declares the
rebuilt function itself, so what the repository says and what the registry runs are the same bytes.

Why not ``Aggregation(time_window=...)``: Feast 0.67's local compute engine refuses time-windowed
aggregations ("Time window aggregation is not supported in the local compute engine"), and its
window-less aggregations are one group-by over the whole read range, with no value *as of each event*.
The windows below are the point-in-time form: per event at ``t``, the window ``[t - w, t]``.
"""

import inspect
from typing import Any

import pandas as pd  # the udfs' signatures: Feast checks that a pandas udf takes and returns a DataFrame
from feast.transformation.udf_rehydrate import rehydrate_udf_from_source


def registered(udf: object) -> tuple[object, str]:
    """``(udf, its source)``, the udf rebuilt from its source text the way Feast rebuilds it from the registry:
    the function applied is byte for byte the one stored, so ``feast plan`` sees no change after a materialization
    (Feast 0.67 compares the stored function, and fails on a BatchFeatureView whose stored bytes differ)."""
    source = inspect.getsource(udf)  # type: ignore[arg-type]
    rebuilt = rehydrate_udf_from_source(source, preferred_name=udf.__name__)  # type: ignore[attr-defined]
    if rebuilt is None:
        raise ValueError(f"udf {udf.__name__!r} does not run from its own source text: keep its imports inside it")  # type: ignore[attr-defined]
    return rebuilt, source


def user_windows_udf(tx: pd.DataFrame) -> pd.DataFrame:
    """Per transaction, the user *after* it: counts and amount sums over 1 h / 24 h / 7 d (window ``[t - w, t]``),
    the 7-day mean and sample standard deviation, the z-score of this amount against the user's previous
    7 days (0 with fewer than 2 of them), and distinct merchants in 24 h. Sums are exact (whole cents in int64).
    """
    import numpy as np
    import pandas as pd

    spark = getattr(tx, "sparkSession", None)  # Feast's Spark engine hands over a Spark DataFrame: the per-user
    if spark is not None:  # windows are sequential, so they run here on the driver, and go back as a Spark frame
        tx = tx.toPandas()
    windows = {"1h": pd.Timedelta(hours=1), "24h": pd.Timedelta(hours=24), "7d": pd.Timedelta(days=7)}
    df = tx.sort_values(["user_id", "event_timestamp", "transaction_id"], kind="stable").reset_index(drop=True)
    if len(df) == 0:
        empty = pd.DataFrame(columns=["user_id", "event_timestamp", "created"])
        return spark.createDataFrame(empty, "user_id string, event_timestamp timestamp, created timestamp") \
            if spark is not None else empty
    codes, _ = pd.factorize(df["user_id"], sort=True)
    t = pd.to_datetime(df["event_timestamp"], utc=True).dt.as_unit("us").astype("int64").to_numpy()
    key = codes.astype(np.int64) * (1 << 52) + (t - t.min())
    amount = df["amount"].to_numpy(dtype=np.float64)
    cents = np.round(amount * 100).astype(np.int64)
    pos = np.arange(len(df))
    csum = np.concatenate([[0], np.cumsum(cents)])
    csq = np.concatenate([[0], np.cumsum(cents * cents)])

    def mean_std(sum_c: Any, sumsq_c: Any, n: Any) -> tuple[Any, Any]:
        safe = np.maximum(n, 1)
        mean_c = sum_c / safe
        var_c = np.maximum(sumsq_c / safe - mean_c**2, 0.0) * safe / np.maximum(safe - 1, 1)
        return np.where(n >= 1, mean_c / 100.0, 0.0), np.where(n >= 2, np.sqrt(var_c) / 100.0, 0.0)

    out: dict[str, Any] = {}
    first = {}
    for name, width in windows.items():
        first[name] = np.searchsorted(key, key - width.value // 1000, side="left")
        out[f"user_txn_count_{name}"] = (pos - first[name] + 1).astype(np.int64)
        out[f"user_amount_sum_{name}"] = (csum[pos + 1] - csum[first[name]]) / 100.0
    n7 = out["user_txn_count_7d"]
    out["user_amount_mean_7d"], out["user_amount_std_7d"] = mean_std(
        csum[pos + 1] - csum[first["7d"]], csq[pos + 1] - csq[first["7d"]], n7)
    prev_n = n7 - 1
    prev_mean, prev_std = mean_std(csum[pos] - csum[first["7d"]], csq[pos] - csq[first["7d"]], prev_n)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = (amount - prev_mean) / prev_std
    out["user_amount_zscore"] = np.where((prev_n >= 2) & (prev_std > 1e-9), np.clip(z, -50.0, 50.0), 0.0)
    merchants = pd.factorize(df["merchant_id"])[0]
    out["user_distinct_merchants_24h"] = np.fromiter(
        (len(set(merchants[s : i + 1].tolist())) for i, s in enumerate(first["24h"])), dtype=np.int64, count=len(df))
    feats = pd.DataFrame({"user_id": df["user_id"], "event_timestamp": df["event_timestamp"],
                          "created": df["created"] if "created" in df else df["event_timestamp"]})
    for name in ("user_txn_count_1h", "user_txn_count_24h", "user_txn_count_7d", "user_amount_sum_1h",
                 "user_amount_sum_24h", "user_amount_sum_7d", "user_amount_mean_7d", "user_amount_std_7d",
                 "user_amount_zscore", "user_distinct_merchants_24h"):
        feats[name] = out[name]
    return spark.createDataFrame(feats) if spark is not None else feats


def merchant_risk_udf(tx: pd.DataFrame) -> pd.DataFrame:
    """Per merchant and day, stamped at the day's end (00:00 UTC of the next day), from the labelled
    transactions of the 7 days up to then: the fraud rate smoothed by 20 pseudo-transactions at the base rate
    of the data read, the day's transaction count and the 7-day average amount. Labels of a day are used only
    after it ends."""
    import numpy as np
    import pandas as pd

    spark = getattr(tx, "sparkSession", None)  # under Feast's Spark engine: see user_windows_udf
    if spark is not None:
        tx = tx.toPandas()

    prior_weight = 20.0
    if len(tx) == 0:
        empty = pd.DataFrame(columns=["merchant_id", "event_timestamp", "created"])
        return spark.createDataFrame(empty, "merchant_id string, event_timestamp timestamp, created timestamp") \
            if spark is not None else empty
    tx = tx.assign(event_timestamp=pd.to_datetime(tx["event_timestamp"], utc=True))
    day = tx["event_timestamp"].dt.floor("D")
    daily = (tx.assign(day=day).groupby(["merchant_id", "day"], sort=True)
             .agg(n=("amount", "size"), fraud=("is_fraud", "sum"), amount=("amount", "sum")).reset_index())
    days = pd.date_range(day.min(), day.max(), freq="D")
    grid = pd.MultiIndex.from_product([sorted(daily["merchant_id"].unique()), days], names=["merchant_id", "day"])
    full = daily.set_index(["merchant_id", "day"]).reindex(grid, fill_value=0).reset_index()
    grouped = full.groupby("merchant_id", sort=False)
    roll = {c: grouped[c].transform(lambda s: s.rolling(7, min_periods=1).sum()) for c in ("n", "fraud", "amount")}
    base_rate = float(tx["is_fraud"].mean())
    feats = pd.DataFrame({
        "merchant_id": full["merchant_id"],
        "event_timestamp": full["day"] + pd.Timedelta(days=1),
        "merchant_fraud_rate_7d": (roll["fraud"] + prior_weight * base_rate) / (roll["n"] + prior_weight),
        "merchant_txn_count_1d": full["n"].astype(np.int64),
        "merchant_amount_mean_7d": np.where(roll["n"] > 0, roll["amount"] / roll["n"].clip(lower=1), 0.0),
    })
    feats["created"] = feats["event_timestamp"]
    out = feats[(roll["n"] > 0).to_numpy()].reset_index(drop=True)
    return spark.createDataFrame(out) if spark is not None else out
