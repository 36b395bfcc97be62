"""End to end: the fraud model on the Feast training set and the tiny LM through the CLI, with MLflow
lineage, a registered version without alias, a loadable export and a reproducible weights hash."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from scipy.stats import mannwhitneyu

from mlops_config import load_config
from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)
from mlops_model import build_tabular_mlp, load_exported
from mlops_training import TrainResult, reproduce_weights_hash

from .conftest import FRAUD

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _client(root: Path):  # type: ignore[no-untyped-def]
    import mlflow
    from mlflow.tracking import MlflowClient

    mlflow.set_tracking_uri(f"sqlite:///{root / '.mlops/mlflow.db'}")
    mlflow.set_registry_uri(f"sqlite:///{root / '.mlops/mlflow.db'}")
    return MlflowClient()


@pytest.fixture(scope="module")
def fraud_root(root: Path, repo_root: Path, prepared_fraud_data: Any) -> Path:
    shutil.copytree(repo_root / "feature_repo", root / "feature_repo")
    cfg = load_config(model="fraud", config_dir=root / "configs", overrides=FRAUD, environ={}).config
    prepared_fraud_data(cfg, root)  # prepare_local_data's output, prepared once per run (tests/support)
    return root


def test_train_fraud_end_to_end_with_lineage_and_reproducible_hash(fraud_root: Path,
                                                                    trained_fraud: TrainResult) -> None:
    """``train_tabular`` with ``FRAUD``: the run trained once per test run in a root of its own (conftest's
    ``trained_fraud``, which test_calibration checks too); read there, re-run here, in this module's root."""
    from mlops_features import training_set
    from mlops_model import EncoderSpec

    result = trained_fraud
    trained_root = result.run_dir.parents[2]  # <root>/.mlops/checkpoints/<run>: its MLflow store is there
    assert result.run_id and result.model_version == "1" and result.steps == 60

    tensors, meta = load_exported(result.export_dir)  # verifies weights_sha256
    assert meta["kind"] == "tabular_mlp" and meta["weights_sha256"] == result.weights_sha256
    assert meta["features"]["feature_service"] == "fraud_v1"
    assert meta["lineage"]["run_id"] == result.run_id and meta["lineage"]["seed"] == 42
    # Serving's path: the one MLP definition + the stored encoder score the training set sensibly.
    model = build_tabular_mlp(meta["architecture"])
    model.load_state_dict(tensors)
    cfg = load_config(model="fraud", config_dir=fraud_root / "configs", overrides=FRAUD, environ={}).config
    df = training_set(cfg.features, cfg.data, fraud_root, contract=FRAUD_CONTRACT)
    with torch.no_grad():
        x = EncoderSpec.from_dict(meta["features"]["encoder"]).encode_frame(df)
        scores = torch.sigmoid(model(torch.from_numpy(x)).squeeze(-1)).numpy()
    y = df["is_fraud"].to_numpy().astype(bool)
    auc = mannwhitneyu(scores[y], scores[~y]).statistic / (y.sum() * (~y).sum())
    assert auc > 0.75

    client = _client(trained_root)
    run = client.get_run(result.run_id)
    tags = run.data.tags
    assert tags["mlops.weights_sha256"] == result.weights_sha256
    assert tags["mlops.data_hash"] == result.data_hash
    assert tags["mlops.feature_service"] == "fraud_v1"
    assert (tags["mlops.seed"], tags["mlops.world_size"], tags["mlops.sharding_strategy"]) == ("42", "2", "FULL_SHARD")
    assert tags["mlops.torch_version"] == torch.__version__ and "mlops.git_commit" in tags
    assert len(client.get_metric_history(result.run_id, "train_loss")) == 60
    assert [m.step for m in client.get_metric_history(result.run_id, "val_f1")] == [20, 40, 60]
    assert run.data.metrics["system/rank1/peak_bytes"] > 0
    artifacts = {a.path for a in client.list_artifacts(result.run_id)}
    assert {"model", "config.json", "checkpoint_manifest.json", "reference_profile.json"} <= artifacts
    profile = json.loads(Path(client.download_artifacts(result.run_id, "reference_profile.json")).read_text())
    assert profile["n_rows"] == int(0.8 * len(df)) and profile["score"] is not None
    version = client.get_model_version("fraud", result.model_version)
    assert version.aliases == [] and version.run_id == result.run_id

    # Same config + seed + data -> the same weights, bit for bit (the reproducibility gate's check).
    assert reproduce_weights_hash(result.run_dir / "config.json", fraud_root) == result.weights_sha256


def test_cli_trains_the_tiny_lm_and_registers_it(root: Path) -> None:
    from mlops_training.zoo import build_causal_lm

    env = {**os.environ, "MLOPS_CONFIG_DIR": str(root / "configs"), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "mlops"), "train", "run", "--model", "llm-tiny", "--nproc", "2", "--json",
         "--set", "training.max_steps=6", "--set", "training.eval_every=3",
         "--set", "training.causal_lm.corpus_max_bytes=200000"],
        capture_output=True, text=True, cwd=root, env=env, check=False, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["steps"] == 6 and out["model_name"] == "llm-tiny" and out["model_version"] == "1"
    tensors, meta = load_exported(out["export_dir"])
    assert meta["kind"] == "causal_lm" and meta["architecture"]["preset"] == "llama-tiny"
    lm = build_causal_lm(meta["architecture"])
    lm.load_state_dict(tensors, strict=True)
    ids = torch.from_numpy(np.frombuffer(b"def main():\n    return 0\n", dtype=np.uint8).astype(np.int64))[None]
    with torch.no_grad():
        assert torch.isfinite(lm(input_ids=ids).logits).all()
    run = _client(root).get_run(out["run_id"])
    assert run.data.tags["mlops.model_kind"] == "causal_lm"
    assert [m.step for m in _client(root).get_metric_history(out["run_id"], "val_loss")] == [3, 6]
