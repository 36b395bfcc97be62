"""The serving lookup reads the online store by the served model's contract's entity keys, and has no default
contract: a lookup never configured with one refuses to read rather than key rows by the reference model's."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from mlops_model import EncoderSpec
from mlops_serving.errors import ModelLoadError
from mlops_serving.lookup import FeatureLookup
from mlops_serving.metrics import ServingMetrics
from mlops_serving.service import folder_loader
from mlops_serving.transformer import TabularModel
from tests.support.contracts import CHURN

SPEC = EncoderSpec.model_validate({
    "version": 1, "input_dim": 2, "derived": [], "categorical": [],
    "numeric": [{"name": "tenure_months", "log": False, "mean": 10.0, "std": 1.0},
                {"name": "usual_charges", "log": False, "mean": 40.0, "std": 5.0}]})
"""A churn encoder: one request field (not looked up) and one store feature."""


class Recording:
    """A source that records the entity rows it is asked for."""

    service_name = "churn_v1"
    defaults: ClassVar[dict[str, Any]] = {"usual_charges": 35.0}

    def __init__(self) -> None:
        self.asked: list[list[dict[str, Any]]] = []

    def get(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        self.asked.append(rows)
        return [{"usual_charges": 50.0 if r["customer_id"] == "c1" else None} for r in rows]

    def ping(self) -> bool:
        return True


def test_a_churn_contract_keys_the_lookup_by_customer_id() -> None:
    source = Recording()
    lookup = FeatureLookup(source)
    lookup.configure(SPEC, contract=CHURN)
    assert lookup.feature_names == ["usual_charges"]  # tenure_months travels with the request
    request = [{"customer_id": "c1", "tenure_months": 3, "plan": "pro"}, {"customer_id": "c2", "tenure_months": 9}]
    found = lookup.get(request)
    assert source.asked == [[{"customer_id": "c1"}, {"customer_id": "c2"}]]  # no user_id / merchant_id
    assert found.columns["usual_charges"] == [50.0, 35.0]  # c2: the source's default


def test_a_lookup_without_a_contract_refuses() -> None:
    lookup = FeatureLookup(Recording())
    with pytest.raises(TypeError, match="contract"):
        lookup.configure(SPEC)  # type: ignore[call-arg]
    with pytest.raises(RuntimeError, match=r"configure\(\.\.\., contract=\.\.\.\)"):
        lookup.get([{"user_id": "u1", "merchant_id": "m1"}])


def test_a_model_not_yet_loaded_names_no_inputs(tmp_path: Any) -> None:
    """Before a version loads there is no contract to describe: not the reference model's inputs."""
    model = TabularModel("m", loader=folder_loader("m", tmp_path / "absent"), lookup=FeatureLookup(Recording()),
                         metrics=ServingMetrics(), prediction_log=None, max_instances=8)
    with pytest.raises(ModelLoadError, match="model 'm' is not loaded"):
        model.get_input_types()
