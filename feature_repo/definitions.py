"""Features as code: the fraud model's entities, source, feature views and feature services.

A plain Feast repository: every object is defined at module level, so ``feast plan``, ``feast apply`` and
``feast ui`` run by hand in this folder see exactly what ``mlops features apply`` registers (the platform
loads this folder with Feast's own ``parse_repo``). Paths are relative to this folder, as Feast resolves them.

How a feature is computed lives here too: each :class:`BatchFeatureView` reads the validated transactions
and carries a pandas ``udf`` that Feast's compute engine (``batch_engine: local``) runs when it materializes
the online store; the platform runs the same ``udf`` over the full history for the offline (training) table.
Each feature's ``Field`` carries its ``default`` (what a model sees for an entity the store does not know)
in its tags. To add a feature: add a view (or a column to a view's ``udf``) here, list it in a *new*
FeatureService version (``fraud_v2``) and point the model config at it; never change ``fraud_v1``.
See ``docs/features.md``.
"""

from __future__ import annotations

from datetime import timedelta

from feast import BatchFeatureView, Entity, FeatureService, Field, FileSource, ValueType
from feast.types import Float64, Int64, String
from windows import merchant_risk_udf, registered, user_windows_udf

TTL = timedelta(days=7)
"""Values older than this are not joined to a label (and come back as the feature's default)."""

user = Entity(name="user", join_keys=["user_id"], value_type=ValueType.STRING, description="Card holder.")
merchant = Entity(name="merchant", join_keys=["merchant_id"], value_type=ValueType.STRING,
                  description="Card acceptor.")

transactions = FileSource(
    name="transactions",
    path="../data/features/transactions.parquet",
    timestamp_field="event_timestamp",
    created_timestamp_column="created",
    description="Validated transactions (every accepted batch), written by the platform's ingestion step.",
)


USER_WINDOWS, USER_WINDOWS_SOURCE = registered(user_windows_udf)
MERCHANT_RISK, MERCHANT_RISK_SOURCE = registered(merchant_risk_udf)


def _feature(name: str, dtype: object, default: float, description: str) -> Field:
    """A feature column; ``default`` is what the platform fills in for an unknown entity or a value past TTL."""
    return Field(name=name, dtype=dtype, description=description, tags={"default": repr(default)})  # type: ignore[arg-type]


user_transactions = BatchFeatureView(
    name="user_transactions",
    mode="pandas",
    source=transactions,
    entities=[user],
    ttl=TTL,
    online=True,
    offline=False,
    udf=USER_WINDOWS,  # type: ignore[arg-type]
    udf_string=USER_WINDOWS_SOURCE,
    schema=[
        Field(name="user_id", dtype=String),
        _feature("user_txn_count_1h", Int64, 0, "Transactions in the last hour."),
        _feature("user_txn_count_24h", Int64, 0, "Transactions in the last 24 hours."),
        _feature("user_txn_count_7d", Int64, 0, "Transactions in the last 7 days."),
        _feature("user_amount_sum_1h", Float64, 0.0, "Amount spent in the last hour."),
        _feature("user_amount_sum_24h", Float64, 0.0, "Amount spent in the last 24 hours."),
        _feature("user_amount_sum_7d", Float64, 0.0, "Amount spent in the last 7 days."),
        _feature("user_amount_mean_7d", Float64, 0.0, "Mean amount over 7 days."),
        _feature("user_amount_std_7d", Float64, 0.0, "Standard deviation of amounts, 7 days."),
        _feature("user_amount_zscore", Float64, 0.0, "Latest amount vs the previous 7 days."),
        _feature("user_distinct_merchants_24h", Int64, 0, "Distinct merchants in 24 hours."),
    ],
    description="Per user, after each transaction: counts and sums over 1 h / 24 h / 7 d windows [t - w, t].",
    # A user's values depend on that user's rows alone: the stream updater refreshes them per transaction.
    tags={"team": "fraud", "mlops.stream": "true"},
)

merchant_risk = BatchFeatureView(
    name="merchant_risk",
    mode="pandas",
    source=transactions,
    entities=[merchant],
    ttl=TTL,
    online=True,
    offline=False,
    udf=MERCHANT_RISK,  # type: ignore[arg-type]
    udf_string=MERCHANT_RISK_SOURCE,
    schema=[
        Field(name="merchant_id", dtype=String),
        _feature("merchant_fraud_rate_7d", Float64, 0.03, "Smoothed fraud rate over 7 days."),
        _feature("merchant_txn_count_1d", Int64, 0, "Transactions on the last full day."),
        _feature("merchant_amount_mean_7d", Float64, 0.0, "Mean amount over 7 days."),
    ],
    description="Per merchant and day, stamped at the day's end: labelled risk of the 7 days up to then.",
    tags={"team": "fraud"},
)

fraud_v1 = FeatureService(
    name="fraud_v1",
    features=[user_transactions, merchant_risk],
    description="Fraud model inputs, version 1: user windows and merchant risk.",
    tags={"owner": "fraud"},
)
