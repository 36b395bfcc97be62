"""Calibration on too little data is refused before the first training step: the older half of the validation
split (what the calibrator is fitted on) must hold both classes; hand-built splits."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mlops_config import load_config
from mlops_training import TrainingError
from mlops_training.tabular_data import calibration_rows, check_calibration_split


def test_the_calibration_half_needs_both_classes_and_the_message_counts_them() -> None:
    val_y = np.array([0, 0, 0, 0, 1, 1, 0, 1], dtype=np.float32)  # older half: 4 negatives, no positive
    assert calibration_rows(len(val_y)) == 4
    with pytest.raises(TrainingError) as caught:
        check_calibration_split(val_y, "platt")
    assert str(caught.value) == (
        "training.calibration='platt' is fitted on the older half of the validation split, and that half (4 of 8 "
        "validation rows) holds 0 positive and 4 negative rows; it needs both classes. Give the run more data "
        "(data.rows, or a longer time range) or set training.calibration: none")
    with pytest.raises(TrainingError, match=r"\(2 of 5 validation rows\) holds 2 positive and 0 negative"):
        check_calibration_split(np.array([1, 1, 0, 0, 0]), "isotonic")
    check_calibration_split(np.array([0, 1, 0, 0]), "platt")  # one of each in the older half: fitted
    check_calibration_split(np.zeros(8), "none")  # nothing is fitted


def _tiny_cache(cache: Path) -> None:
    """A prepared training set (what prepare_tabular writes): 64 train rows with positives, 40 validation rows
    whose older 20 are all negative."""
    rng = np.random.default_rng(0)
    arrays = {"train_x": rng.normal(size=(64, 3)), "train_y": (np.arange(64) % 4 == 0),
              "val_x": rng.normal(size=(40, 3)), "val_y": np.r_[np.zeros(20), np.arange(20) % 2]}
    cache.mkdir(parents=True)
    for name, arr in arrays.items():
        np.save(cache / f"{name}.npy", np.ascontiguousarray(arr, dtype=np.float32), allow_pickle=False)
    (cache / "meta.json").write_text(json.dumps({"feature_service": "fraud_v1", "data_hash": "hand-built",
                                                 "encoder": {}}), encoding="utf-8")


def test_training_on_such_a_split_fails_before_any_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real worker, one process: it stops where the task is made, so no checkpoint (one is due every step)
    and no result are written; the old code trained every step, then failed at export."""
    from mlops_training.worker import train_worker

    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)  # init_distributed sets a world of one
    overrides = [f"training.checkpoint.dir={tmp_path / 'ckpt'}", "training.max_steps=3", "training.eval_every=1",
                 "training.checkpoint.every_steps=1", "training.batch_size=16"]
    config = load_config(model="fraud", overrides=overrides, environ={}).config
    assert config.training.calibration == "platt"  # the default
    run_dir = tmp_path / "ckpt" / "tiny"
    _tiny_cache(run_dir / "data")
    with pytest.raises(TrainingError) as caught:
        train_worker(config, tmp_path, run_name="tiny", track=False)
    assert sorted(p.name for p in run_dir.iterdir()) == ["data"]  # no step checkpoint, no result.json
    assert ("training.calibration='platt' is fitted on the older half of the validation split, and that half (20 of "
            "40 validation rows) holds 0 positive and 20 negative rows") in str(caught.value)
