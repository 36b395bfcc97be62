"""The gates verify a version's signature before scoring it: a model altered in the artifact store is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mlops_config import ProvenanceConfig, TrackingConfig
from mlops_evaluation import EvaluationError
from mlops_evaluation.scorer import load_version
from mlops_model import build_tabular_mlp, model_signer, model_verifier, save_exported

ARCH = {"input_dim": 2, "hidden_sizes": [3]}
ENCODER = {"version": 1, "input_dim": 2, "derived": [], "categorical": [],
           "numeric": [{"name": n, "log": False, "mean": 0.0, "std": 1.0} for n in ("a", "b")]}


@pytest.fixture
def registered(tmp_path: Path) -> tuple[object, Path]:
    """Version 1 of ``fraud`` whose run holds a signed export as artifact ``model/``; returns client and artifact."""
    from mlops_core import mlflow_client

    provenance = ProvenanceConfig(local_key_dir=str(tmp_path / "keys"))
    torch.manual_seed(0)
    folder = save_exported(tmp_path / "export", build_tabular_mlp(ARCH).state_dict(),
                           {"kind": "tabular_mlp", "architecture": ARCH, "features": {"encoder": ENCODER}},
                           sign=model_signer(provenance, tmp_path))
    client = mlflow_client(TrackingConfig(uri="sqlite:///mlflow.db", artifact_location="artifacts"), tmp_path)
    run = client.create_run(client.create_experiment("gates", artifact_location=str(tmp_path / "store")))
    client.log_artifacts(run.info.run_id, str(folder), "model")
    client.create_registered_model("fraud")
    client.create_model_version("fraud", source=f"{run.info.artifact_uri}/model", run_id=run.info.run_id)
    (stored,) = [p.parent for p in (tmp_path / "store").rglob("model.sig")]
    return client, stored


def test_signed_version_loads_and_altered_one_is_refused(registered, tmp_path: Path) -> None:
    client, stored = registered
    check = model_verifier(ProvenanceConfig(local_key_dir=str(tmp_path / "keys")), tmp_path)
    assert load_version(client, "fraud", "1", tmp_path / "a", check).meta["architecture"] == ARCH
    weights = stored / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-3] ^= 0x40
    weights.write_bytes(bytes(data))
    with pytest.raises(EvaluationError, match=r"'fraud' v1 is refused before scoring: .*changed model.safetensors"):
        load_version(client, "fraud", "1", tmp_path / "b", check)
