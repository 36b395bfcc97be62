"""The review report's quick retrain (mlops_features.retrain): its training frame equals Feast's point-in-time
training set, its AUC sees a feature that carries signal, and a new FeatureService is reported against the
champion's with the AUC delta."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mlops_config import DataConfig, FeaturesConfig
from mlops_features import plan_features, training_set
from mlops_features.repo import load_repo
from mlops_features.retrain import Definitions, quick_auc, service_frame
from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)

Prepared = tuple[Path, DataConfig, FeaturesConfig]

_spec = importlib.util.spec_from_file_location("review_cases", Path(__file__).with_name("test_review.py"))
assert _spec is not None and _spec.loader is not None
_review = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_review)


@pytest.mark.parametrize("service", ["fraud_v1", "fraud_rt_v1"])
def test_the_quick_frame_equals_feasts_training_set(prepared: Prepared, service: str) -> None:
    root, data, features = prepared
    raw = pd.read_parquet(root / features.source_dir / "transactions.parquet")
    frame, names = service_frame(Definitions.of_repo(load_repo(features, root)), service, raw, FRAUD_CONTRACT)
    feast = training_set(features.model_copy(update={"feature_service": service}), data, root, contract=FRAUD_CONTRACT)
    assert names == [c for c in feast.columns if c in names] and len(frame) == len(feast)
    mine = frame.set_index("transaction_id").loc[feast["transaction_id"], names]
    np.testing.assert_allclose(mine.to_numpy(dtype=float), feast[names].to_numpy(dtype=float), rtol=1e-9, atol=1e-9)


def test_the_quick_auc_learns_a_feature_that_carries_the_label(prepared: Prepared) -> None:
    root, _, features = prepared
    raw = pd.read_parquet(root / features.source_dir / "transactions.parquet")
    frame, _ = service_frame(Definitions.of_repo(load_repo(features, root)), "fraud_v1", raw, FRAUD_CONTRACT)
    rng = np.random.default_rng(0)
    leaked = frame.assign(copy=frame["is_fraud"] + rng.normal(0, 0.01, len(frame)))
    assert quick_auc(leaked, ["copy"], FRAUD_CONTRACT)["auc"] > 0.99
    inverted = frame.assign(copy=-frame["is_fraud"] + rng.normal(0, 0.01, len(frame)))
    assert quick_auc(inverted, ["copy"], FRAUD_CONTRACT)["auc"] > 0.99  # the sign is learned, not assumed


def test_a_new_feature_service_is_retrained_against_the_champions(prepared: Prepared, tmp_path: Path) -> None:
    root, features = _review._copy(prepared, tmp_path, _review.NEW_VIEW.format(
        fn="max_udf", body=_review.MAX_24H, feature="amt_max_24h", view="user_amount_max"))
    report = plan_features(features, root, contract=FRAUD_CONTRACT)
    assert report.ok, report.problems
    (row,) = report.retrain
    assert row["service"] == "fraud_v2" and row["champion_service"] == "fraud_v1"
    assert 0.6 < row["champion_auc"] <= 1 and 0.6 < row["auc"] <= 1
    assert row["delta_auc"] == pytest.approx(row["auc"] - row["champion_auc"])
    assert row["train_rows"] + row["test_rows"] == len(pd.read_parquet(root / features.source_dir /
                                                                       "transactions.parquet"))
    assert "| fraud_v2 | fraud_v1 |" in report.to_markdown()
