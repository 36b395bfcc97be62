"""The contract an export records: its round trip through ``model.json``, the fallback for an older export (said
once in the log), a malformed entry refused naming the field, a canary recording another contract refused."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch

from mlops_model import (
    DEFAULT_CONTRACT,
    ExportedModel,
    ExportedModelError,
    build_tabular_mlp,
    contract_meta,
    read_meta,
    save_exported,
)
from mlops_serving.lookup import FeatureLookup
from mlops_serving.metrics import ServingMetrics
from mlops_serving.service import folder_loader
from mlops_serving.transformer import TabularModel
from tests.support.contracts import CHURN

ENCODER = {"version": 1, "input_dim": 1, "derived": [], "categorical": [],
           "numeric": [{"name": "x", "log": False, "mean": 0.0, "std": 1.0}]}


class Source:
    service_name = "s"
    defaults: ClassVar[dict[str, Any]] = {}

    def get(self, rows: Any) -> list[dict[str, Any]]:
        return [{} for _ in rows]

    def ping(self) -> bool:
        return True


def _export(folder: Path, contract: Any) -> Path:
    arch = {"input_dim": 1, "hidden_sizes": [2], "dropout": 0.0}
    torch.manual_seed(0)
    meta: dict[str, Any] = {"kind": "tabular_mlp", "architecture": arch, "features": {"encoder": ENCODER}}
    if contract is not None:
        meta["contract"] = contract
    return save_exported(folder, build_tabular_mlp(arch).state_dict(), meta)


def _model(stable: Path, canary: Path | None = None) -> TabularModel:
    return TabularModel("m", loader=folder_loader("m", stable, canary), lookup=FeatureLookup(Source()),
                      metrics=ServingMetrics(), prediction_log=None, max_instances=8,
                      canary_percent=50 if canary else 0)


def test_the_recorded_contract_comes_back_equal_with_its_field_order(tmp_path: Path) -> None:
    folder = _export(tmp_path / "m", contract_meta(CHURN))
    assert read_meta(folder)["contract"]["fields"][0] == ["tenure_months", "int"]  # the file's keys are sorted
    loaded = ExportedModel.load(folder).contract
    assert loaded == CHURN and list(loaded.fields) == ["tenure_months", "monthly_charges", "plan", "region"]


@pytest.mark.parametrize(("contract", "named"), [
    ({**contract_meta(CHURN), "label": ""}, "contract.label"),
    ({**contract_meta(CHURN), "fields": [["tenure_months", "decimal"]]}, "contract.fields"),
    ({**contract_meta(CHURN), "fields": [["tenure_months"]]}, "contract.fields"),
    ({**contract_meta(CHURN), "colour": "red"}, "contract.colour"),
])
def test_a_malformed_contract_is_refused_naming_the_field(tmp_path: Path, contract: Any, named: str) -> None:
    with pytest.raises(ExportedModelError, match=named):
        ExportedModel.load(_export(tmp_path / "m", contract))
    model = _model(tmp_path / "m")
    assert not model.load() and named in model.reason


def test_an_export_without_a_contract_is_served_under_the_default_said_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    model = _model(_export(tmp_path / "1", None))
    with caplog.at_level(logging.WARNING, logger="mlops_serving.transformer"):
        assert model.load() and model.load()
    assert model.contract == DEFAULT_CONTRACT
    said = [r.getMessage() for r in caplog.records if "records no contract" in r.getMessage()]
    assert len(said) == 1 and "version 1" in said[0]


def test_a_canary_recording_another_contract_is_refused(tmp_path: Path) -> None:
    model = _model(_export(tmp_path / "1", contract_meta(CHURN)), _export(tmp_path / "2", None))
    assert not model.load()
    assert "version 2 (canary) records another contract" in model.reason and "customer_id" in model.reason
    assert model.contract is None


def test_served_model_contract_drives_the_lookup_keys(tmp_path: Path) -> None:
    model = _model(_export(tmp_path / "1", contract_meta(CHURN)))
    assert model.load() and model.contract == CHURN
    assert [i["name"] for i in model.get_input_types()][:2] == ["customer_id", "tenure_months"]


def test_a_model_whose_entity_keys_the_online_store_does_not_read_by_is_refused(tmp_path: Path) -> None:
    class FraudKeyedSource(Source):
        entity_keys = DEFAULT_CONTRACT.entity_keys  # as OnlineFeatures built with the reference contract says

    model = TabularModel("m", loader=folder_loader("m", _export(tmp_path / "1", contract_meta(CHURN))),
                       lookup=FeatureLookup(FraudKeyedSource()), metrics=ServingMetrics(), prediction_log=None,
                       max_instances=8)
    assert not model.load()
    assert "entity keys ['customer_id']" in model.reason and "['user_id', 'merchant_id']" in model.reason
