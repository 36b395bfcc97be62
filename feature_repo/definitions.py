"""Features as code: the fraud model's entities, sources, feature views and feature services.

The platform loads this file (``mlops features apply``) and calls :func:`build` with the folder that the
ingestion step writes the source tables to, so the same definitions serve every profile and test.
To add a feature: compute it in ``mlops_features.aggregates``, declare it in a view here, add it to a
*new* FeatureService version (``fraud_v2``); never change what ``fraud_v1`` returns under a model.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from feast import Entity, FeatureService, FeatureView, Field, FileSource, ValueType
from feast.types import Float64, Int64

FEATURE_DEFAULTS: dict[str, float] = {
    "user_txn_count_1h": 0,
    "user_txn_count_24h": 0,
    "user_txn_count_7d": 0,
    "user_amount_sum_1h": 0.0,
    "user_amount_sum_24h": 0.0,
    "user_amount_sum_7d": 0.0,
    "user_amount_mean_7d": 0.0,
    "user_amount_std_7d": 0.0,
    "user_amount_zscore": 0.0,
    "user_distinct_merchants_24h": 0,
    "merchant_fraud_rate_7d": 0.03,
    "merchant_txn_count_1d": 0,
    "merchant_amount_mean_7d": 0.0,
}
"""What a model sees for an entity the store does not know (a new user or merchant, or a value past its TTL)."""


def build(source_dir: str | Path, ttl: timedelta) -> list:
    """Every Feast object of the repository, with sources under ``source_dir`` and views living for ``ttl``."""
    source_dir = Path(source_dir)
    user = Entity(name="user", join_keys=["user_id"], value_type=ValueType.STRING, description="Card holder.")
    merchant = Entity(
        name="merchant", join_keys=["merchant_id"], value_type=ValueType.STRING, description="Card acceptor."
    )
    user_source = FileSource(
        name="user_transactions_source",
        path=str(source_dir / "user_transactions.parquet"),
        timestamp_field="event_timestamp",
        created_timestamp_column="created",
    )
    merchant_source = FileSource(
        name="merchant_risk_source",
        path=str(source_dir / "merchant_risk.parquet"),
        timestamp_field="event_timestamp",
        created_timestamp_column="created",
    )
    user_transactions = FeatureView(
        name="user_transactions",
        entities=[user],
        ttl=ttl,
        schema=[
            Field(name="user_txn_count_1h", dtype=Int64, description="Transactions in the last hour."),
            Field(name="user_txn_count_24h", dtype=Int64, description="Transactions in the last 24 hours."),
            Field(name="user_txn_count_7d", dtype=Int64, description="Transactions in the last 7 days."),
            Field(name="user_amount_sum_1h", dtype=Float64, description="Amount spent in the last hour."),
            Field(name="user_amount_sum_24h", dtype=Float64, description="Amount spent in the last 24 hours."),
            Field(name="user_amount_sum_7d", dtype=Float64, description="Amount spent in the last 7 days."),
            Field(name="user_amount_mean_7d", dtype=Float64, description="Mean amount over 7 days."),
            Field(name="user_amount_std_7d", dtype=Float64, description="Standard deviation of amounts, 7 days."),
            Field(name="user_amount_zscore", dtype=Float64, description="Latest amount vs the previous 7 days."),
            Field(name="user_distinct_merchants_24h", dtype=Int64, description="Distinct merchants in 24 hours."),
        ],
        source=user_source,
        online=True,
        tags={"team": "fraud", "computed_by": "mlops_features.aggregates.compute_user_features"},
    )
    merchant_risk = FeatureView(
        name="merchant_risk",
        entities=[merchant],
        ttl=ttl,
        schema=[
            Field(name="merchant_fraud_rate_7d", dtype=Float64, description="Smoothed fraud rate over 7 days."),
            Field(name="merchant_txn_count_1d", dtype=Int64, description="Transactions on the last full day."),
            Field(name="merchant_amount_mean_7d", dtype=Float64, description="Mean amount over 7 days."),
        ],
        source=merchant_source,
        online=True,
        tags={"team": "fraud", "computed_by": "mlops_features.aggregates.compute_merchant_features"},
    )
    fraud_v1 = FeatureService(
        name="fraud_v1",
        features=[user_transactions, merchant_risk],
        description="Fraud model inputs, version 1: user windows and merchant risk.",
        tags={"owner": "fraud"},
    )
    return [user, merchant, user_source, merchant_source, user_transactions, merchant_risk, fraud_v1]
