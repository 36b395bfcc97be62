"""Features as code: the fraud model's entities, sources, feature views and feature services.

The platform loads this file (``mlops features apply``) and calls :func:`build` with the folder that the
ingestion step writes the source tables to, so the same definitions serve every profile and test.
To add a feature: compute it in ``mlops_features.aggregates``, list it in
``mlops_model.contract.FEATURES`` (names, types, defaults and descriptions live there once), add it to a
*new* FeatureService version (``fraud_v2``); never change what ``fraud_v1`` returns under a model.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from feast import Entity, FeatureService, FeatureView, Field, FileSource, ValueType
from feast.types import Float64, Int64

from mlops_model import FEATURE_DEFAULTS, FEATURES

_DTYPES = {"int64": Int64, "float64": Float64}

__all__ = ["FEATURE_DEFAULTS", "build"]
"""``FEATURE_DEFAULTS``: what a model sees for an entity the store does not know (new, or past its TTL)."""


def _fields(entity: str) -> list[Field]:
    """The views' schemas, from the model contract's one feature list (names, types, descriptions)."""
    return [Field(name=f.name, dtype=_DTYPES[f.dtype], description=f.description) for f in FEATURES
            if f.entity == entity]


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
        schema=_fields("user_id"),
        source=user_source,
        online=True,
        tags={"team": "fraud", "computed_by": "mlops_features.aggregates.compute_user_features"},
    )
    merchant_risk = FeatureView(
        name="merchant_risk",
        entities=[merchant],
        ttl=ttl,
        schema=_fields("merchant_id"),
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
