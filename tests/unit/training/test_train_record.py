"""The train stage's DVC output (``mlops train run --record``): what a run made of its inputs, nothing of the run.

Two runs of the same code, config and data differ in their MLflow run, version, folders and timings; their
records must be the same bytes, or ``dvc.lock`` moves after every ``make demo``.
"""

from __future__ import annotations

import json
from pathlib import Path

from mlops_training.launcher import TrainResult


def _result(run: str, version: str, seconds: float, weights: str = "ab" * 32) -> TrainResult:
    return TrainResult(run_name=f"fraud-{run}", run_dir=Path(f"/tmp/{run}"), export_dir=Path(f"/tmp/{run}/model"),
                       weights_sha256=weights, data_hash="d" * 64, config_sha256="c" * 64, run_id=f"id-{run}",
                       model_name="fraud", model_version=version, steps=600, resumed_from_step=None,
                       metrics={"val_loss": 0.21, "val_auc": 0.93}, system={"samples_per_second": seconds},
                       trajectory={"20": "e" * 64, "600": weights})


def test_two_runs_of_one_recipe_record_the_same_bytes_and_another_model_does_not() -> None:
    first, second = _result("a", "1", 812.5), _result("b", "7", 455.0)
    assert first.to_json() != second.to_json()  # run id, version, folders and timing differ
    dump = lambda r: json.dumps(r.record(), indent=2)  # noqa: E731  (as the CLI writes it)
    assert dump(first) == dump(second)
    doc = first.record()
    assert set(doc) == {"weights_sha256", "data_hash", "config_sha256", "steps", "metrics", "trajectory"}
    assert doc["metrics"] == {"val_auc": 0.93, "val_loss": 0.21} and list(doc["metrics"]) == ["val_auc", "val_loss"]
    text = dump(first)
    for run_specific in ("id-a", "/tmp/a", "812.5", "fraud-a"):
        assert run_specific not in text
    other = _result("a", "1", 812.5, weights="ff" * 32)
    assert dump(other) != dump(first)  # a different model is a different record
