"""The transformer's metrics of one micro-batch: the store call and the encode + forward pass are observed once
per batch (they happen once), the request series once per request; request ids are cheap and unique."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)
from mlops_model import build_tabular_mlp, save_exported
from mlops_serving.lookup import FeatureLookup
from mlops_serving.metrics import ServingMetrics
from mlops_serving.schema import parse_v1
from mlops_serving.server import REQUEST_ID
from mlops_serving.service import folder_loader
from mlops_serving.transformer import TabularModel, _Batch, _request_ids


class DictSource:
    """An online store held in a dict: one entity (``u1``) known, the rest unknown; counts its calls."""

    service_name = "fraud_v1"
    defaults: Mapping[str, Any] = {"f_user": 0.0}

    def __init__(self) -> None:
        self.calls = 0

    def get(self, entity_rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        self.calls += 1
        return [{"f_user": 2.0, "_unknown_entity": False} if r["user_id"] == "u1"
                else {"f_user": None, "_unknown_entity": True} for r in entity_rows]

    def ping(self) -> bool:
        return True


def _model(tmp_path: Path, source: DictSource) -> tuple[TabularModel, ServingMetrics]:
    arch = {"input_dim": 2, "hidden_sizes": [3], "dropout": 0.0}
    encoder = {"version": 1, "input_dim": 2, "derived": [], "categorical": [],
               "numeric": [{"name": "amount", "log": False, "mean": 0.0, "std": 1.0},
                           {"name": "f_user", "log": False, "mean": 0.0, "std": 1.0}]}
    torch.manual_seed(0)
    folder = save_exported(tmp_path / "1", build_tabular_mlp(arch).state_dict(),
                           {"kind": "tabular_mlp", "architecture": arch,
                            "features": {"feature_service": "fraud_v1", "encoder": encoder}})
    metrics = ServingMetrics()
    model = TabularModel("fraud", loader=folder_loader("fraud", folder),
                       lookup=FeatureLookup(source), metrics=metrics,
                       prediction_log=None, max_instances=8)
    assert model.load()
    return model, metrics


def _request(user: str, n: int = 1) -> _Batch:
    row = {"user_id": user, "merchant_id": "m1", "amount": 3.0, "currency": "EUR", "category": "grocery",
           "country": "DE", "device": "ios", "channel": "online"}
    return _Batch(parse_v1({"instances": [row] * n}, 8, contract=FRAUD_CONTRACT), "v1", f"r-{user}", ticket=None)


def _value(metrics: ServingMetrics, name: str) -> float:
    got = metrics.registry.get_sample_value(name, {"model": "fraud", "version": "1", "variant": "stable"})
    return 0.0 if got is None else got


def test_one_store_call_and_one_pass_are_observed_once_for_a_batch_of_three_requests(tmp_path: Path) -> None:
    source = DictSource()
    model, metrics = _model(tmp_path, source)
    scored = asyncio.run(model._score_batches([_request("u1"), _request("u2", n=2), _request("u1")]))
    assert source.calls == 1  # one lookup for the whole batch: what the histogram should count
    assert [len(s.scores) for s in scored] == [1, 2, 1]  # type: ignore[union-attr]
    assert _value(metrics, "mlops_serving_feature_lookup_seconds_count") == 1.0
    assert _value(metrics, "mlops_serving_predict_seconds_count") == 1.0
    assert _value(metrics, "mlops_serving_request_seconds_count") == 3.0
    assert _value(metrics, "mlops_serving_predictions_total") == 4.0
    assert _value(metrics, "mlops_serving_score_count") == 4.0
    assert _value(metrics, "mlops_serving_unknown_entity_predictions_total") == 2.0
    requests = metrics.registry.get_sample_value(
        "mlops_serving_requests_total", {"model": "fraud", "version": "1", "variant": "stable", "protocol": "v1"})
    assert requests == 3.0


def test_request_ids_are_unique_valid_and_differ_between_processes() -> None:
    ids = _request_ids()
    drawn = [next(ids) for _ in range(10_000)]
    assert len(set(drawn)) == len(drawn)
    assert all(REQUEST_ID.fullmatch(i) for i in drawn[:100])  # what the server accepts from a client too
    other = next(_request_ids())  # another process draws another prefix
    assert other.split("-")[0] != drawn[0].split("-")[0]
