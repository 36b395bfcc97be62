"""A tabular export records the contract its training set was prepared under; serving reads it back equal."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import torch

from mlops_model import ExportedModel, ModelKind, build_tabular_mlp, contract_meta
from mlops_training.export import export_weights
from tests.support.contracts import CHURN

ENCODER = {"version": 1, "input_dim": 1, "derived": [], "categorical": [],
           "numeric": [{"name": "tenure_months", "log": False, "mean": 0.0, "std": 1.0}]}


def _export(folder: Path, contract: object) -> ExportedModel:
    arch = {"input_dim": 1, "hidden_sizes": [2], "dropout": 0.0}
    torch.manual_seed(0)
    outcome = SimpleNamespace(built=SimpleNamespace(kind=ModelKind.TABULAR, architecture=arch),
                              full_state=build_tabular_mlp(arch).state_dict())
    task = SimpleNamespace(features_meta=lambda: {"feature_service": "churn_v1", "encoder": ENCODER},
                           data=SimpleNamespace(contract=contract))
    return ExportedModel.load(export_weights(folder, outcome, task, {"seed": 0}))  # type: ignore[arg-type]


def test_the_export_records_the_prepared_contract(tmp_path: Path) -> None:
    assert _export(tmp_path / "m", contract_meta(CHURN)).contract == CHURN


def test_a_cache_from_before_the_contract_was_kept_exports_none(tmp_path: Path) -> None:
    assert _export(tmp_path / "m", None).contract is None
