"""The tabular model's contract as code reads it: the declared :class:`~mlops_config.ContractConfig`.

A prediction request carries, per instance, the entity keys (the online store is looked up with them) and
the request-time fields (the model reads them as sent). The feature store adds the FeatureService's
features; their names, types and defaults are declared once, in ``feature_repo/``. Where a FeatureStore is
at hand its FeatureService is the source of truth for them; where it is not, the exported model's recorded
encoder is (``EncoderSpec.input_columns``).

The contract itself is declared with the model (``configs/models/<m>.yaml``, section ``contract``). Functions
take it as a parameter (the config's ``contract`` section, or the contract an export records:
:func:`mlops_model.contract_of`); :data:`DEFAULT_CONTRACT` — the reference model's declaration, kept equal to its
YAML by ``tests/unit/config/test_contract_config.py`` — is only the fallback for an export made before models
recorded their contract.
"""

from __future__ import annotations

from mlops_config import ContractConfig

DEFAULT_CONTRACT = ContractConfig.model_validate({
    "record_id": "transaction_id",
    "entity_keys": ["user_id", "merchant_id"],
    "unknown_flags": {"user_id": "unknown_user", "merchant_id": "unknown_merchant"},
    "fields": {"amount": "float", "currency": "string", "category": "string", "country": "string",
               "device": "string", "channel": "string"},
    "label": "is_fraud",
    "log_prefixes": ["amount", "user_amount_sum", "user_amount_mean", "user_amount_std", "merchant_amount"],
    "derived": [{"name": "amount_vs_user_mean_7d", "op": "log_ratio", "args": ["amount", "user_amount_mean_7d"]}],
    "expectations": {
        "ranges": {"amount": {"min": 0.01, "max": 50_000.0}},
        "allowed_values": {
            "currency": ["BRL", "EUR", "GBP", "INR", "NGN", "SGD", "USD"],
            "category": ["grocery", "restaurants", "fuel", "fashion", "health", "travel", "electronics", "gaming",
                         "digital_goods", "jewelry"],
            "country": ["US", "GB", "DE", "FR", "NL", "ES", "BR", "IN", "NG", "SG"],
            "device": ["ios", "android", "web_desktop", "web_mobile", "pos_terminal"],
            "channel": ["card_present", "contactless", "online"],
        },
        "not_null": ["transaction_id", "user_id", "merchant_id", "event_timestamp", "created", "amount", "currency",
                     "category", "country", "device", "channel", "is_fraud"],
    },
    "key_features": ["amount", "user_txn_count_1h", "user_amount_zscore"],
})
"""The reference model's contract (``configs/models/<project.model>.yaml`` declares the same)."""

UNKNOWN_ENTITY = "_unknown_entity"
"""Flag on an online-store row: True when any of its entities was unknown (defaults were used)."""
