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

    Under Feast's Spark engine ``tx`` is a Spark DataFrame: a user's values need that user's rows alone, so the
    users are hashed into ``spark.sql.shuffle.partitions`` groups and each group runs the same pandas code on
    a Spark worker (``applyInPandas``); nothing is collected on the driver.
    """
    import numpy as np
    import pandas as pd

    columns = {"user_txn_count_1h": "bigint", "user_txn_count_24h": "bigint", "user_txn_count_7d": "bigint",
               "user_amount_sum_1h": "double", "user_amount_sum_24h": "double", "user_amount_sum_7d": "double",
               "user_amount_mean_7d": "double", "user_amount_std_7d": "double", "user_amount_zscore": "double",
               "user_distinct_merchants_24h": "bigint"}

    def windows_of(tx: pd.DataFrame) -> pd.DataFrame:
        windows = {"1h": pd.Timedelta(hours=1), "24h": pd.Timedelta(hours=24), "7d": pd.Timedelta(days=7)}
        df = tx.sort_values(["user_id", "event_timestamp", "transaction_id"], kind="stable").reset_index(drop=True)
        if len(df) == 0:
            return pd.DataFrame(columns=["user_id", "event_timestamp", "created", *columns])
        codes, _ = pd.factorize(df["user_id"], sort=True)
        t = pd.to_datetime(df["event_timestamp"], utc=True).dt.as_unit("us").astype("int64").to_numpy()
        # One sorted key (user, time) with the times as ranks among the distinct times: user * (ranks + 1) stays
        # far inside int64 (µs offsets times 2**52 overflowed past 2048 users and broke every window).
        times = np.unique(t)
        stride = np.int64(times.shape[0] + 1)
        user = codes.astype(np.int64) * stride
        key = user + np.searchsorted(times, t, side="left")
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
            # the first row of the same user at or after t - w: the rank of the first distinct time >= t - w
            first[name] = np.searchsorted(key, user + np.searchsorted(times, t - width.value // 1000, side="left"),
                                          side="left")
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
            (len(set(merchants[s : i + 1].tolist())) for i, s in enumerate(first["24h"])), dtype=np.int64,
            count=len(df))
        feats = pd.DataFrame({"user_id": df["user_id"], "event_timestamp": df["event_timestamp"],
                              "created": df["created"] if "created" in df else df["event_timestamp"]})
        for name in columns:
            feats[name] = out[name]
        return feats

    spark = getattr(tx, "sparkSession", None)
    if spark is None:
        return windows_of(tx)
    from pyspark.sql import functions as sf

    groups = int(spark.conf.get("spark.sql.shuffle.partitions") or "8")
    schema = ", ".join(["user_id string, event_timestamp timestamp, created timestamp",
                        *(f"{c} {t}" for c, t in columns.items())])
    return (tx.withColumn("_group", sf.pmod(sf.hash("user_id"), sf.lit(groups))).groupBy("_group")
            .applyInPandas(lambda part: windows_of(part.drop(columns="_group")), schema))


def merchant_risk_udf(tx: pd.DataFrame) -> pd.DataFrame:
    """Per merchant and day, stamped at the day's end (00:00 UTC of the next day), from the labelled
    transactions of the 7 days up to then: the fraud rate smoothed by 20 pseudo-transactions at the base rate
    of the data read, the day's transaction count and the 7-day average amount. Labels of a day are used only
    after it ends.

    Under Feast's Spark engine the base rate and the first and last day of the data read come from one Spark
    aggregate (a single row to the driver), then merchants are hashed into groups computed with the same
    pandas code on the workers, as in :func:`user_windows_udf`. Rows are sorted before any floating-point sum,
    so both engines add the same amounts in the same order.
    """
    import numpy as np
    import pandas as pd

    prior_weight = 20.0
    columns = {"merchant_fraud_rate_7d": "double", "merchant_txn_count_1d": "bigint",
               "merchant_amount_mean_7d": "double"}

    def risk_of(tx: pd.DataFrame, frauds: int, rows: int, first_day: Any, last_day: Any) -> pd.DataFrame:
        if len(tx) == 0:
            return pd.DataFrame(columns=["merchant_id", "event_timestamp", "created", *columns])
        tx = tx.assign(event_timestamp=pd.to_datetime(tx["event_timestamp"], utc=True))
        tx = tx.sort_values(["merchant_id", "event_timestamp", "transaction_id"], kind="stable")
        day = tx["event_timestamp"].dt.floor("D")
        daily = (tx.assign(day=day).groupby(["merchant_id", "day"], sort=True)
                 .agg(n=("amount", "size"), fraud=("is_fraud", "sum"), amount=("amount", "sum")).reset_index())
        days = pd.date_range(first_day, last_day, freq="D")
        grid = pd.MultiIndex.from_product([sorted(daily["merchant_id"].unique()), days],
                                          names=["merchant_id", "day"])
        full = daily.set_index(["merchant_id", "day"]).reindex(grid, fill_value=0).reset_index()
        grouped = full.groupby("merchant_id", sort=False)
        roll = {c: grouped[c].transform(lambda s: s.rolling(7, min_periods=1).sum()) for c in ("n", "fraud", "amount")}
        base_rate = frauds / rows
        feats = pd.DataFrame({
            "merchant_id": full["merchant_id"],
            "event_timestamp": full["day"] + pd.Timedelta(days=1),
            "merchant_fraud_rate_7d": (roll["fraud"] + prior_weight * base_rate) / (roll["n"] + prior_weight),
            "merchant_txn_count_1d": full["n"].astype(np.int64),
            "merchant_amount_mean_7d": np.where(roll["n"] > 0, roll["amount"] / roll["n"].clip(lower=1), 0.0),
        })
        feats["created"] = feats["event_timestamp"]
        return feats[(roll["n"] > 0).to_numpy()].reset_index(drop=True)

    spark = getattr(tx, "sparkSession", None)
    if spark is None:
        if len(tx) == 0:
            return risk_of(tx, 0, 0, None, None)
        stamps = pd.to_datetime(tx["event_timestamp"], utc=True)
        return risk_of(tx, int(tx["is_fraud"].astype(np.int64).sum()), len(tx), stamps.min().floor("D"),
                       stamps.max().floor("D"))
    from pyspark.sql import functions as sf

    stats = tx.agg(sf.sum(sf.col("is_fraud").cast("bigint")).alias("frauds"), sf.count(sf.lit(1)).alias("rows"),
                   sf.unix_micros(sf.min("event_timestamp")).alias("first"),  # epoch µs: no time zone on the way
                   sf.unix_micros(sf.max("event_timestamp")).alias("last")).first()
    frauds, rows = int(stats["frauds"] or 0), int(stats["rows"])
    first_day, last_day = ((pd.Timestamp(stats["first"], unit="us", tz="UTC").floor("D"),
                            pd.Timestamp(stats["last"], unit="us", tz="UTC").floor("D")) if rows else (None, None))
    groups = int(spark.conf.get("spark.sql.shuffle.partitions") or "8")
    schema = ", ".join(["merchant_id string, event_timestamp timestamp, created timestamp",
                        *(f"{c} {t}" for c, t in columns.items())])
    return (tx.withColumn("_group", sf.pmod(sf.hash("merchant_id"), sf.lit(groups))).groupBy("_group")
            .applyInPandas(lambda part: risk_of(part.drop(columns="_group"), frauds, rows, first_day, last_day),
                           schema))
