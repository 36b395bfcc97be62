"""The ``contract`` section: a bad declaration is refused naming the value and what was expected; a declared
contract sets monitoring's defaults; the reference model's YAML and the code's default contract agree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from mlops_config import ContractConfig, MonitoringConfig, PlatformConfig, load_config
from mlops_model import DEFAULT_CONTRACT


def churn(**changes: Any) -> dict[str, Any]:
    """A second use case's contract, built by hand: nothing in it is the reference model's."""
    declared: dict[str, Any] = {
        "record_id": "event_id",
        "entity_keys": ["customer_id"],
        "fields": {"tenure_months": "int", "monthly_charges": "float", "plan": "string"},
        "label": "churned",
        "expectations": {"ranges": {"tenure_months": {"min": 0, "max": 120}},
                         "allowed_values": {"plan": ["basic", "pro"]},
                         "not_null": ["event_id", "customer_id", "churned"]},
        "key_features": ["monthly_charges", "support_calls_30d"],
    }
    declared.update(changes)
    return declared


def test_a_sound_declaration_reads_back_by_role() -> None:
    c = ContractConfig.model_validate(churn())
    assert c.numeric_fields == ("tenure_months", "monthly_charges")
    assert c.categorical_fields == ("plan",)
    assert c.required_fields == ("customer_id", "tenure_months", "monthly_charges", "plan")
    assert c.raw_columns == ("event_id", "customer_id", "event_timestamp", "created", "tenure_months",
                             "monthly_charges", "plan", "churned")


BAD = {
    "unknown type": ({"fields": {"tenure_months": "decimal", "plan": "string"}},
                     r"\{'tenure_months': 'decimal'\} declare an unknown type; expected one of \['float', 'int', "
                     r"'string'\]"),
    "label is a request field": ({"fields": {"churned": "int", "plan": "string"}},
                                 r"\['churned'\] declared as a request field but also an id, timestamp or the label"),
    "entity key is a request field": ({"fields": {"customer_id": "string"}},
                                      r"\['customer_id'\] declared as a request field"),
    "label is an entity key": ({"label": "customer_id"}, r"label 'customer_id' is also an id or timestamp column"),
    "key feature is an id": ({"key_features": ["customer_id"]},
                             r"key_features \['customer_id'\] are ids, timestamps or the label"),
    "key feature is the label": ({"key_features": ["churned"]}, r"key_features \['churned'\] are ids"),
    "key feature twice": ({"key_features": ["plan", "plan"]}, r"key_features name \['plan'\] more than once"),
    "range on an unknown column": ({"expectations": {"ranges": {"age": {"min": 0}}}},
                                   r"expectations.ranges names \['age'\], which are not numeric request fields "
                                   r"\['tenure_months', 'monthly_charges'\]"),
    "range on a string field": ({"expectations": {"ranges": {"plan": {"min": 0}}}},
                                r"expectations.ranges names \['plan'\]"),
    "allowed values of a number": ({"expectations": {"allowed_values": {"tenure_months": ["1"]}}},
                                   r"expectations.allowed_values names \['tenure_months'\], which are not string "
                                   r"request fields \['plan'\]"),
    "not-null on an unknown column": ({"expectations": {"not_null": ["amount"]}},
                                      r"expectations.not_null names \['amount'\], which are not raw-batch columns"),
    "empty range": ({"expectations": {"ranges": {"tenure_months": {"min": 5, "max": 1}}}},
                    r"expectations.ranges.tenure_months: min 5.0 > max 1.0"),
    "flag of a non-key": ({"unknown_flags": {"user_id": "unknown_user"}},
                          r"unknown_flags name \['user_id'\], which are not entity keys \['customer_id'\]"),
    "derived column named as a field": ({"derived": [{"name": "event_id", "op": "log_ratio",
                                                      "args": ["tenure_months", "monthly_charges"]}]},
                                        r"\['event_id'\] declared as a derived column"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_declaration_is_refused_naming_it(case: str) -> None:
    changes, message = BAD[case]
    with pytest.raises(ValidationError, match=message):
        ContractConfig.model_validate(churn(**changes))


def test_a_bad_declaration_in_a_model_file_fails_the_load(config_dir: Path) -> None:
    (config_dir / "models" / "churn.yaml").write_text(
        "contract:\n  record_id: event_id\n  entity_keys: [customer_id]\n  fields: {plan: text}\n  label: churned\n")
    with pytest.raises(Exception, match=r"\{'plan': 'text'\} declare an unknown type"):
        load_config(model="churn", config_dir=config_dir, environ={})


def test_the_reference_models_file_declares_the_default_contract(repo_root: Path) -> None:
    """The code's fallback (callers handed no contract) is the reference model's declaration, value for value."""
    loaded = load_config(model="fraud", config_dir=repo_root / "configs", environ={}).config
    assert loaded.contract == DEFAULT_CONTRACT
    # and monitoring, left to the contract, is what its own defaults were before contracts were declared
    assert loaded.monitoring.key_features == ("amount", "user_txn_count_1h", "user_amount_zscore")
    assert loaded.monitoring.ignore_columns == (
        "request_id", "ts", "model_name", "model_version", "variant", "transaction_id", "user_id", "merchant_id",
        "event_timestamp", "created", "degraded", "latency_ms", "is_fraud")


def test_a_model_without_a_contract_resolves_no_use_case_columns() -> None:
    """The defaults name no model's columns: without a contract, no key feature and only serving bookkeeping."""
    monitoring = PlatformConfig.model_validate({}).monitoring
    assert monitoring.key_features == ()
    assert monitoring.ignore_columns == ("request_id", "ts", "model_name", "model_version", "variant",
                                         "event_timestamp", "created", "degraded", "latency_ms")


def test_monitoring_follows_a_declared_contract_unless_set() -> None:
    followed = PlatformConfig.model_validate({"contract": churn()}).monitoring
    assert followed.key_features == ("monthly_charges", "support_calls_30d")
    assert followed.ignore_columns == ("request_id", "ts", "model_name", "model_version", "variant", "event_id",
                                       "customer_id", "event_timestamp", "created", "degraded", "latency_ms",
                                       "churned")
    chosen = PlatformConfig.model_validate({"contract": churn(), "monitoring": {"key_features": ["plan"]}}).monitoring
    assert chosen.key_features == ("plan",)
    assert "churned" in chosen.ignore_columns
    assert PlatformConfig().monitoring == MonitoringConfig()  # no contract: the section's own defaults


def test_a_config_built_directly_resolves_monitoring_as_a_loaded_one() -> None:
    """``PlatformConfig(contract=..., monitoring=MonitoringConfig(...))`` kept the section's defaults: pydantic
    ignores the copy an after-validator returns when the model is built by ``__init__``."""
    contract = ContractConfig.model_validate(churn())
    built = PlatformConfig(contract=contract, monitoring=MonitoringConfig(min_f1=0.2)).monitoring
    assert built.key_features == ("monthly_charges", "support_calls_30d")
    assert built.ignore_columns[5:7] == ("event_id", "customer_id") and built.ignore_columns[-1] == "churned"
    assert built == PlatformConfig.model_validate({"contract": churn(), "monitoring": {"min_f1": 0.2}}).monitoring
    chosen = PlatformConfig(contract=contract, monitoring=MonitoringConfig(ignore_columns=("event_id",))).monitoring
    assert chosen.ignore_columns == ("event_id",) and chosen.key_features == ("monthly_charges", "support_calls_30d")
