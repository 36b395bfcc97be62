"""Request schema, canary arithmetic, feature defaults: pure functions, hand-built cases."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import pytest

from mlops_config import ContractConfig
from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)
from mlops_serving.canary import CanaryRouter
from mlops_serving.errors import BadRequestError, TooManyInstancesError
from mlops_serving.schema import parse_columns, parse_v1


def good(**over: Any) -> dict[str, Any]:
    row = {"user_id": "u1", "merchant_id": "m1", "amount": 10, "currency": "EUR", "category": "grocery",
           "country": "DE", "device": "ios", "channel": "online"}
    row.update(over)
    return row


def test_v1_rows_are_plain_and_typed() -> None:
    rows = parse_v1({"instances": [good(transaction_id="t9")]}, max_instances=4, contract=FRAUD_CONTRACT)
    assert rows == [{**good(amount=10.0), "transaction_id": "t9"}]
    assert isinstance(rows[0]["amount"], float)
    assert parse_v1({"instances": [good()]}, 4, contract=FRAUD_CONTRACT)[0]["transaction_id"] is None


@pytest.mark.parametrize(("body", "fragment"), [
    ({"instances": [good(amount=math.nan)]}, "finite"),
    ({"instances": [good(amount=math.inf)]}, "finite"),
    ({"instances": [good(amount=-1)]}, "[0, 1e+09]"),
    ({"instances": [good(amount=False)]}, "must be a number"),
    ({"instances": [good(user_id=7)]}, "must be a string"),
    ({"instances": [good(extra=1)]}, "unknown field"),
    ({"instances": [{"user_id": "u"}]}, "missing field"),
    ({"instances": "x"}, "must be a list"),
    ({"instances": []}, "no instances"),
    ({"rows": []}, "unknown top-level"),
    ([good()], "JSON object"),
])
def test_v1_refusals_name_the_problem(body: Any, fragment: str) -> None:
    with pytest.raises(BadRequestError) as info:
        parse_v1(body, max_instances=4, contract=FRAUD_CONTRACT)
    assert fragment in str(info.value)


def test_too_many_instances_is_its_own_error() -> None:
    with pytest.raises(TooManyInstancesError, match="5 instances; at most 4"):
        parse_v1({"instances": [good()] * 5}, max_instances=4, contract=FRAUD_CONTRACT)


def test_columns_must_have_equal_lengths() -> None:
    cols = {k: [v, v] for k, v in good().items()}
    assert len(parse_columns(cols, 4, contract=FRAUD_CONTRACT)) == 2
    cols["amount"] = [1.0]
    with pytest.raises(BadRequestError, match="different lengths"):
        parse_columns(cols, 4, contract=FRAUD_CONTRACT)


@pytest.mark.parametrize("percent", [0, 1, 10, 25, 33, 50, 99, 100])
def test_canary_split_is_exact_over_every_window_of_100(percent: int) -> None:
    router = CanaryRouter("stable", "canary", percent)
    picks = [router.pick().name for _ in range(300)]
    for start in (0, 100, 200):
        assert picks[start : start + 100].count("canary") == percent
    # spread evenly: never more than ceil(100 / p) stable picks in a row when p > 0
    if 0 < percent < 100:
        longest = max(len(run) for run in "".join("s" if p == "stable" else "c" for p in picks).split("c"))
        assert longest <= math.ceil(100 / percent)


def test_canary_without_target_is_all_stable() -> None:
    router = CanaryRouter("stable", None, 50)
    assert {router.pick().name for _ in range(10)} == {"stable"}
    with pytest.raises(ValueError, match=r"0\.\.100"):
        CanaryRouter("s", "c", 101)


def test_lookup_defaults_come_from_the_source_then_the_encoder() -> None:
    from mlops_model import EncoderSpec
    from mlops_serving.lookup import FeatureLookup

    class Source:
        service_name = "fraud_v1"
        defaults: ClassVar[dict[str, float]] = {"f1": 7.0}

        def get(self, rows: Any) -> list[dict[str, Any]]:
            return [{"_unknown_entity": True} for _ in rows]

        def ping(self) -> bool:
            return True

    spec = EncoderSpec.from_dict({
        "version": 1, "input_dim": 3 + 2 + 2, "derived": [],
        "numeric": [{"name": n, "log": False, "mean": m, "std": 1.0} for n, m in (("amount", 3.0), ("f1", 1.0),
                                                                                 ("f2", 2.5))],
        "categorical": [{"name": "currency", "vocab": ["EUR"]}, {"name": "segment", "vocab": ["a"]}]})
    lookup = FeatureLookup(Source())
    lookup.configure(spec, contract=ContractConfig.model_validate(
        {"record_id": "id", "entity_keys": ["user_id"], "fields": {"amount": "float", "currency": "string"},
         "label": "y"}))
    found = lookup.get([{"user_id": "u"}])
    # request fields (amount, currency) are not looked up; f1 from the source, f2 the training mean
    assert found.features == [{"f1": 7.0, "f2": 2.5, "segment": None}] and found.unknown == [True]
