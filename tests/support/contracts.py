"""A second tabular use case's contract, built by hand: the platform must follow it, not the reference's names."""

from __future__ import annotations

from mlops_config import ContractConfig

CHURN = ContractConfig.model_validate({
    "record_id": "event_id",
    "entity_keys": ["customer_id"],
    "fields": {"tenure_months": "int", "monthly_charges": "float", "plan": "string", "region": "string"},
    "label": "churned",
    "log_prefixes": ["monthly_charges"],
    "derived": [{"name": "charges_vs_usual", "op": "log_ratio", "args": ["monthly_charges", "usual_charges"]}],
    "expectations": {
        "ranges": {"tenure_months": {"min": 0, "max": 120}, "monthly_charges": {"min": 0.0}},
        "allowed_values": {"plan": ["basic", "pro"]},
        "not_null": ["event_id", "customer_id", "event_timestamp", "created", "tenure_months", "plan", "churned"],
    },
    "key_features": ["monthly_charges"],
})
"""Customer churn: one entity, an int and a float field (the float heavy-tailed), two categoricals (``region``
free, ``plan`` from a set), a derived column against a feature-store column, label ``churned``."""
