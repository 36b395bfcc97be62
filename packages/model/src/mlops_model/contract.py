"""The fraud model's request schema and feature list: the one definition every package reads.

A prediction request carries, per instance, the entity keys (the online store is looked up with them) and
the request-time fields (the model reads them as sent). The feature store adds the FeatureService's
features. Where a FeatureStore is at hand its FeatureService is the source of truth for the feature
names; where it is not, the exported model's recorded encoder is (``EncoderSpec.input_columns``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ENTITY_KEYS: tuple[str, ...] = ("user_id", "merchant_id")
"""Join keys of the Feast entities ``user`` and ``merchant`` (strings)."""

NUMERIC_FIELDS: tuple[str, ...] = ("amount",)
"""Request-time numeric fields (finite, ≥ 0)."""

CATEGORICAL_FIELDS: tuple[str, ...] = ("currency", "category", "country", "device", "channel")
"""Request-time categorical fields (strings; values the encoder has not seen encode as "other")."""

REQUEST_FIELDS: tuple[str, ...] = NUMERIC_FIELDS + CATEGORICAL_FIELDS
"""Fields known at request time; they travel with the transaction, not through the feature store."""

OPTIONAL_FIELDS: tuple[str, ...] = ("transaction_id",)
"""Fields a request may carry; only logged."""

REQUIRED_FIELDS: tuple[str, ...] = ENTITY_KEYS + REQUEST_FIELDS
"""What every request instance must hold."""

LABEL = "is_fraud"
"""The training label (0/1)."""

UNKNOWN_FLAGS: dict[str, str] = {"user_id": "unknown_user", "merchant_id": "unknown_merchant"}
"""Flag per entity key on an online-store row: True when the store had no value for that entity."""

UNKNOWN_ENTITY = "_unknown_entity"
"""Flag on an online-store row: True when any of its entities was unknown (defaults were used)."""


@dataclass(frozen=True)
class Feature:
    """One feature of the FeatureService: the entity it belongs to, its type, its default and meaning."""

    name: str
    entity: Literal["user_id", "merchant_id"]
    dtype: Literal["int64", "float64"]
    default: float
    """What a model sees for an entity the store does not know (new, or its value past the TTL)."""
    description: str


FEATURES: tuple[Feature, ...] = (
    Feature("user_txn_count_1h", "user_id", "int64", 0, "Transactions in the last hour."),
    Feature("user_txn_count_24h", "user_id", "int64", 0, "Transactions in the last 24 hours."),
    Feature("user_txn_count_7d", "user_id", "int64", 0, "Transactions in the last 7 days."),
    Feature("user_amount_sum_1h", "user_id", "float64", 0.0, "Amount spent in the last hour."),
    Feature("user_amount_sum_24h", "user_id", "float64", 0.0, "Amount spent in the last 24 hours."),
    Feature("user_amount_sum_7d", "user_id", "float64", 0.0, "Amount spent in the last 7 days."),
    Feature("user_amount_mean_7d", "user_id", "float64", 0.0, "Mean amount over 7 days."),
    Feature("user_amount_std_7d", "user_id", "float64", 0.0, "Standard deviation of amounts, 7 days."),
    Feature("user_amount_zscore", "user_id", "float64", 0.0, "Latest amount vs the previous 7 days."),
    Feature("user_distinct_merchants_24h", "user_id", "int64", 0, "Distinct merchants in 24 hours."),
    Feature("merchant_fraud_rate_7d", "merchant_id", "float64", 0.03, "Smoothed fraud rate over 7 days."),
    Feature("merchant_txn_count_1d", "merchant_id", "int64", 0, "Transactions on the last full day."),
    Feature("merchant_amount_mean_7d", "merchant_id", "float64", 0.0, "Mean amount over 7 days."),
)
"""The features of FeatureService ``fraud_v1``, in its order (``feature_repo/definitions.py`` declares its views
from them)."""

USER_FEATURES: tuple[str, ...] = tuple(f.name for f in FEATURES if f.entity == "user_id")
MERCHANT_FEATURES: tuple[str, ...] = tuple(f.name for f in FEATURES if f.entity == "merchant_id")
FEATURE_DEFAULTS: dict[str, float] = {f.name: f.default for f in FEATURES}
"""Default per feature, by name (what the store's lookup fills in for an unknown entity)."""
