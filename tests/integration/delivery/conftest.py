"""A registry version with a real exported model behind it, as training registers one."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def register_exported() -> Callable[[Path, str, int], str]:
    """``register_exported(root, model, seed) -> version``: a tiny exported model logged as the run's ``model/``
    artifact and registered with its ``mlops.weights_sha256`` tag (the default SQLite registry under ``root``)."""

    def register(root: Path, model: str, seed: int) -> str:
        import mlflow
        import torch

        from mlops_config import TrackingConfig
        from mlops_core import tracking_scope
        from mlops_model import read_meta, save_exported

        gen = torch.Generator().manual_seed(seed)
        state = {"0.weight": torch.randn(4, 3, generator=gen), "0.bias": torch.randn(4, generator=gen)}
        folder = save_exported(root / f"export-{seed}", state, {"kind": "tabular_mlp", "architecture": {
            "input_dim": 3, "hidden_sizes": [4]}, "features": {}, "lineage": {"seed": seed}})
        weights = read_meta(folder)["weights_sha256"]
        with tracking_scope(TrackingConfig(), root) as client:  # the default (local SQLite) registry under root
            if not client.search_registered_models(filter_string=f"name = '{model}'"):
                client.create_registered_model(model)
            with mlflow.start_run() as run:
                mlflow.log_artifacts(str(folder), "model")
            mv = client.create_model_version(model, source=f"{run.info.artifact_uri}/model",
                                             run_id=run.info.run_id, tags={"mlops.weights_sha256": weights})
        return str(mv.version)

    return register
