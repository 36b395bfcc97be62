"""The fraud model's request schema and feature list: the one definition every package reads.

A prediction request carries, per instance, the entity keys (the online store is looked up with them) and
the request-time fields (the model reads them as sent). The feature store adds the FeatureService's
features; their names, types and defaults are declared once, in ``feature_repo/``. Where a FeatureStore is
at hand its FeatureService is the source of truth for them; where it is not, the exported model's recorded
encoder is (``EncoderSpec.input_columns``).
"""

from __future__ import annotations

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
