"""Training with ``training.calibration=isotonic``: model.json records the map and what it did on unseen
validation rows, and the decision threshold chosen on the calibrated validation scores; ExportedModel serves the
calibrated scores and reads the threshold; the drift reference holds them too."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mlops_config import load_config
from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)
from mlops_model import Calibration, ExportedModel, build_tabular_mlp, load_exported
from mlops_training import TrainResult, train_tabular

from . import conftest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FRAUD = ("data.rows=20000", "training.max_steps=60", "training.eval_every=20", "training.checkpoint.every_steps=30",
         "training.calibration=isotonic")


def test_isotonic_calibration_is_recorded_and_applied(root: Path, repo_root: Path, prepared_fraud_data: Any) -> None:
    import torch

    shutil.copytree(repo_root / "feature_repo", root / "feature_repo")
    cfg = load_config(model="fraud", config_dir=root / "configs", overrides=FRAUD, environ={}).config
    prepared_fraud_data(cfg, root)  # prepare_local_data's output, prepared once per run (tests/support)
    result = train_tabular(model="fraud", config_dir=root / "configs", overrides=FRAUD)
    tensors, meta = load_exported(result.export_dir)
    cal = meta["calibration"]
    assert cal["method"] == "isotonic" and cal["holdout_rows"] > 0 and cal["evaluation_rows"] > 0
    # the network is trained with a positive-class weight: its raw scores overstate fraud; the map fixes that
    assert cal["ece_after"] < cal["ece_before"]
    model = ExportedModel.load(result.export_dir)
    net = build_tabular_mlp(meta["architecture"])
    net.load_state_dict(tensors)
    x = np.random.default_rng(0).normal(size=(64, model.input_dim)).astype(np.float32)
    with torch.no_grad():
        raw = torch.sigmoid(net(torch.from_numpy(x)).reshape(-1)).numpy()
    expected = np.interp(raw.astype(np.float64), cal["x"], cal["y"])  # isotonic = interpolation between breakpoints
    np.testing.assert_allclose(model.score_encoded(x), expected, rtol=1e-6, atol=1e-9)
    assert Calibration.from_dict(json.loads(json.dumps(cal)), source="test").method == "isotonic"
    # the per-version threshold, chosen on the validation split's served (calibrated) scores
    chosen = meta["decision_threshold"]
    assert chosen["criterion"] == "f1" and chosen["split"] == "validation" and chosen["positives"] > 0
    assert model.decision_threshold == chosen["value"]
    assert min(cal["y"]) <= chosen["value"] <= max(cal["y"])  # a calibrated score, not a raw one


def test_by_default_platt_scores_are_decided_at_a_recorded_threshold_that_beats_half(
        root: Path, repo_root: Path, prepared_fraud_data: Any, trained_fraud: TrainResult) -> None:
    """No calibration override: the default (platt) is recorded, and the threshold chosen on validation beats the
    old fixed 0.5 on the evaluation holdout (rows training never saw), by scikit-learn's F1. That run is conftest's
    ``trained_fraud`` (the same overrides, trained once per test run; test_lineage checks it too)."""
    from sklearn.metrics import f1_score

    from mlops_evaluation.holdout import load_holdout

    overrides = [o for o in FRAUD if not o.startswith("training.calibration=")]
    cfg = load_config(model="fraud", config_dir=root / "configs", overrides=overrides, environ={}).config
    if not (root / "feature_repo").exists():
        shutil.copytree(repo_root / "feature_repo", root / "feature_repo")
        prepared_fraud_data(cfg, root)
    assert tuple(overrides) == conftest.FRAUD, "trained_fraud is this config's run only with the same overrides"
    model = ExportedModel.load(trained_fraud.export_dir)
    assert model.meta["calibration"]["method"] == "platt"
    chosen = model.meta["decision_threshold"]
    assert chosen["criterion"] == "f1" and model.decision_threshold == chosen["value"]
    assert 0 < chosen["value"] < 0.5  # calibrated probabilities of a rare class: far below the old fixed 0.5
    holdout = load_holdout(cfg.features, cfg.data, root, cfg.evaluation.tabular.holdout_fraction,
                           contract=FRAUD_CONTRACT)
    y, served = holdout.frame[FRAUD_CONTRACT.label].to_numpy().astype(int), model.score_frame(holdout.frame)
    assert f1_score(y, served >= chosen["value"]) > f1_score(y, served >= 0.5)
