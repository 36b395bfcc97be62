"""Request validation follows the contract it is given: a second use case's fields, types and record id."""

from __future__ import annotations

import pytest

from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)
from mlops_serving.errors import BadRequestError
from mlops_serving.schema import parse_columns, parse_v1, validate_instance
from tests.support.contracts import CHURN

GOOD = {"customer_id": "c1", "tenure_months": 12, "monthly_charges": 29.5, "plan": "pro", "region": "north"}


def test_a_request_of_the_declared_fields_becomes_a_row() -> None:
    assert validate_instance(GOOD, 0, contract=CHURN) == {**GOOD, "tenure_months": 12.0, "event_id": None}
    assert validate_instance({**GOOD, "event_id": "e9"}, 0, contract=CHURN)["event_id"] == "e9"
    assert parse_v1({"instances": [GOOD, GOOD]}, 5, contract=CHURN)[1]["plan"] == "pro"
    assert parse_columns({k: [v] for k, v in GOOD.items()}, 5, contract=CHURN)[0]["monthly_charges"] == 29.5


@pytest.mark.parametrize(("instance", "message"), [
    ({**GOOD, "amount": 3.0}, r"instance 0 has unknown field\(s\) \['amount'\]; expected only \['customer_id', "
                              r"'event_id', 'monthly_charges', 'plan', 'region', 'tenure_months'\]"),
    ({k: v for k, v in GOOD.items() if k != "plan"}, r"instance 0 is missing field\(s\) \['plan'\]"),
    ({**GOOD, "tenure_months": "12"}, r"'tenure_months' must be a number, got str"),
    ({**GOOD, "region": 7}, r"'region' must be a string, got int"),
    ({**GOOD, "event_id": 5}, r"'event_id' must be a string, got int"),
])
def test_a_request_off_the_contract_is_refused_naming_the_field(instance: dict, message: str) -> None:
    with pytest.raises(BadRequestError, match=message):
        validate_instance(instance, 0, contract=CHURN)


def test_fraud_s_request_is_refused_under_another() -> None:
    default_request = {"user_id": "u1", "merchant_id": "m1", "amount": 3.0, "currency": "EUR", "category": "fuel",
                       "country": "DE", "device": "ios", "channel": "online"}
    with pytest.raises(BadRequestError, match=r"unknown field\(s\) \['amount', 'category'"):
        validate_instance(default_request, 0, contract=CHURN)
    assert validate_instance(default_request, 0, contract=FRAUD_CONTRACT)["amount"] == 3.0  # fraud's


def test_there_is_no_default_request_schema() -> None:
    """A caller that forgets the served model's contract fails at the call, not silently under fraud's fields."""
    with pytest.raises(TypeError, match="contract"):
        validate_instance(GOOD, 0)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="contract"):
        parse_v1({"instances": [GOOD]}, 5)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="contract"):
        parse_columns({k: [v] for k, v in GOOD.items()}, 5)  # type: ignore[call-arg]
