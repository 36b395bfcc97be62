"""The batch encodes from the lookup's columns: its scores are byte-identical to scoring ``encode_frame`` of the
hand-merged rows (request fields + the store's features, defaults for unknown entities), for a source that
answers by column and one that answers by row, with a stable and a canary version, at several batch sizes."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)
from mlops_model import ExportedModel, build_tabular_mlp, save_exported
from mlops_serving.lookup import FeatureLookup, LookupResult
from mlops_serving.metrics import ServingMetrics
from mlops_serving.schema import parse_v1
from mlops_serving.service import folder_loader
from mlops_serving.transformer import TabularModel, _Batch, _model_columns

USERS = {"u1": {"user_amount_mean_7d": 40.0, "user_txn_count_1h": 3}, "u2": {"user_amount_mean_7d": 5.5,
                                                                           "user_txn_count_1h": None}}
DEFAULTS = {"user_amount_mean_7d": 20.0, "user_txn_count_1h": 0}
ENCODER = {"version": 1, "input_dim": 3 + 1 + 3 + 2,
           "numeric": [{"name": "amount", "log": True, "mean": 2.0, "std": 1.5},
                       {"name": "user_amount_mean_7d", "log": True, "mean": 3.0, "std": 0.8},
                       {"name": "user_txn_count_1h", "log": False, "mean": 1.0, "std": 2.0}],
           "derived": [{"name": "amount_vs_user_mean_7d", "op": "log_ratio",
                        "args": ["amount", "user_amount_mean_7d"], "mean": 0.2, "std": 1.1}],
           "categorical": [{"name": "currency", "vocab": ["EUR", "GBP"]}, {"name": "device", "vocab": ["ios"]}]}


class RowSource:
    """An online store in a dict answering one dict per row; unknown users get nothing (the lookup's defaults)."""

    service_name = "fraud_v1"
    defaults: Mapping[str, Any] = DEFAULTS

    def get(self, entity_rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        return [{**USERS.get(r["user_id"], {}), "_unknown_entity": r["user_id"] not in USERS} for r in entity_rows]

    def ping(self) -> bool:
        return True


class ColumnSource(RowSource):
    """The same store answering by column, as ``OnlineFeatures.get_columns`` does (defaults already applied)."""

    def get_columns(self, entity_rows: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
        known = [USERS.get(r["user_id"]) for r in entity_rows]
        return {"_unknown_entity": [k is None for k in known],
                **{name: [DEFAULTS[name] if k is None else k[name] for k in known] for name in DEFAULTS}}


def _export(folder: Path, seed: int) -> Path:
    arch = {"input_dim": ENCODER["input_dim"], "hidden_sizes": [4], "dropout": 0.0}
    torch.manual_seed(seed)
    return save_exported(folder, build_tabular_mlp(arch).state_dict(),
                         {"kind": "tabular_mlp", "architecture": arch,
                          "features": {"feature_service": "fraud_v1", "encoder": ENCODER}})


def _request(i: int, n: int) -> _Batch:
    rows = [{"user_id": ("u1", "u2", "u9")[(i + k) % 3], "merchant_id": "m1", "amount": [3.0, 0.0, 250.0][k % 3],
             "currency": ("EUR", "USD", "GBP")[(i + k) % 3], "category": "grocery", "country": "DE",
             "device": ("ios", "android")[k % 2], "channel": "online"} for k in range(n)]
    return _Batch(parse_v1({"instances": rows}, 64, contract=FRAUD_CONTRACT), "v1", f"r{i}", ticket=None)


def _expected(model: ExportedModel, batches: Sequence[_Batch]) -> np.ndarray:
    """Hand-merged rows: the request's fields and the user's stored features, the defaults where there are none;
    scored in one pass, as the server scores a variant's rows (a forward pass's last bits depend on its size)."""
    merged = []
    for row in (row for batch in batches for row in batch.rows):
        stored = USERS.get(row["user_id"], {})
        feats = {name: default if stored.get(name) is None else stored[name] for name, default in DEFAULTS.items()}
        merged.append({**row, **feats})
    return model.score_encoded(model.encoder.encode_frame(pd.DataFrame(merged)))


@pytest.mark.parametrize("source", [ColumnSource(), RowSource()], ids=["by-column", "by-row"])
@pytest.mark.parametrize("sizes", [[1], [9], [3, 1, 5], [64], [20, 20, 24]])
def test_batch_scores_are_those_of_encode_frame_on_the_merged_rows(tmp_path: Path, source: RowSource,
                                                                  sizes: list[int]) -> None:
    stable, canary = _export(tmp_path / "1", 0), _export(tmp_path / "2", 1)
    model = TabularModel("fraud", loader=folder_loader("fraud", stable, canary),
                       lookup=FeatureLookup(source), metrics=ServingMetrics(),
                       prediction_log=None, max_instances=64, canary_percent=50)
    assert model.load()
    weights = {"1": ExportedModel.load(stable), "2": ExportedModel.load(canary)}
    batches = [_request(i, n) for i, n in enumerate(sizes)]
    scored = asyncio.run(model._score_batches(batches))
    for version, weights_of in weights.items():
        mine = [(b, s) for b, s in zip(batches, scored, strict=True)
                if not isinstance(s, Exception) and s.variant.target.ref.version == version]
        if not mine:
            continue
        got = np.concatenate([s.scores for _, s in mine])  # type: ignore[union-attr]
        assert got.tobytes() == _expected(weights_of, [b for b, _ in mine]).tobytes()
    for batch, one in zip(batches, scored, strict=True):
        assert not isinstance(one, Exception)
        assert one.unknown == [r["user_id"] == "u9" for r in batch.rows]


def test_model_columns_pick_the_rows_and_prefer_the_stores_value() -> None:
    rows = [{"amount": 1.0, "device": "ios"}, {"amount": 2.0}, {"amount": 3.0, "device": "web", "f": 9.0}]
    found = LookupResult(columns={"f": [10.0, 20.0, 30.0]}, unknown=[False] * 3, degraded=False)
    assert _model_columns(["amount", "f", "device"], rows, found, None) == {
        "amount": [1.0, 2.0, 3.0], "f": [10.0, 20.0, 30.0], "device": ["ios", None, "web"]}
    assert _model_columns(["amount", "f", "device"], rows, found, [0, 2]) == {
        "amount": [1.0, 3.0], "f": [10.0, 30.0], "device": ["ios", "web"]}
    assert found.rows(1, 3) == [{"f": 20.0}, {"f": 30.0}]
