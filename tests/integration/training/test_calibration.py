"""Training with ``training.calibration=isotonic``: model.json records the map and what it did on unseen
validation rows; ExportedModel serves the calibrated scores; the drift reference holds them too."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from mlops_config import load_config
from mlops_model import Calibration, ExportedModel, build_tabular_mlp, load_exported
from mlops_training import train_fraud

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FRAUD = ("data.rows=20000", "training.max_steps=60", "training.eval_every=20", "training.checkpoint.every_steps=30",
         "training.calibration=isotonic")


def test_isotonic_calibration_is_recorded_and_applied(root: Path, repo_root: Path) -> None:
    import torch

    from mlops_features import prepare_local_data

    shutil.copytree(repo_root / "feature_repo", root / "feature_repo")
    cfg = load_config(model="fraud", config_dir=root / "configs", overrides=FRAUD, environ={}).config
    prepare_local_data(cfg.data, cfg.features, root, seed=cfg.project.seed)
    result = train_fraud(config_dir=root / "configs", overrides=FRAUD)
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
