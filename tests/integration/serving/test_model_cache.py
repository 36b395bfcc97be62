"""The served-model cache: a version is downloaded from a real MLflow registry (SQLite) into a temporary folder
and renamed into place, so an interrupted download (a folder holding model.json but not the weights) is never
taken for a cached version."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration


def _register(root: Path, folder: Path) -> tuple[Any, str, Path]:
    """``folder`` logged as a run's artifacts and registered as ``fraud`` version 1, alias ``champion``."""
    import mlflow
    from mlflow.tracking import MlflowClient

    from mlops_config import TrackingConfig

    uri = f"sqlite:///{root / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    artifacts = root / "mlartifacts"
    client = MlflowClient()
    exp = client.create_experiment("cache-test", artifact_location=artifacts.as_uri())
    with mlflow.start_run(experiment_id=exp) as run:
        mlflow.log_artifacts(str(folder), "model")
    client.create_registered_model("fraud")
    version = client.create_model_version("fraud", f"{run.info.artifact_uri}/model", run_id=run.info.run_id)
    client.set_registered_model_alias("fraud", "champion", version.version)
    return TrackingConfig(uri=uri), str(version.version), artifacts


def test_a_partial_download_is_not_trusted_and_a_complete_one_is_reused(tmp_path: Path, kit: Any) -> None:
    from mlops_serving.registry import resolve_alias
    from mlops_serving.served import load_model

    exported = kit.export_model(tmp_path / "export", seed=3)
    tracking, version, artifacts = _register(tmp_path, exported)
    cache = tmp_path / "cache"
    partial = cache / "fraud" / version
    partial.mkdir(parents=True)
    shutil.copy(exported / "model.json", partial / "model.json")  # what a download killed mid-way leaves

    ref = resolve_alias(tracking, tmp_path, "fraud", "champion", cache)
    assert ref.version == version
    assert (ref.folder / "model.safetensors").read_bytes() == (exported / "model.safetensors").read_bytes()
    load_model(ref)  # the weights are there and match model.json's hash
    assert sorted(p.name for p in (cache / "fraud").iterdir()) == [version]  # no temporary folder left behind

    shutil.rmtree(artifacts)  # a complete download is served from the cache: the store is not needed again
    again = resolve_alias(tracking, tmp_path, "fraud", "champion", cache)
    assert again.folder == ref.folder
    load_model(again)


def test_a_version_without_model_json_is_not_cached(tmp_path: Path, kit: Any) -> None:
    from mlops_serving import ModelLoadError
    from mlops_serving.registry import resolve_alias

    exported = kit.export_model(tmp_path / "export", seed=3)
    (exported / "model.json").unlink()
    tracking, _, _ = _register(tmp_path, exported)
    cache = tmp_path / "cache"
    with pytest.raises(ModelLoadError, match=r"model\.json"):
        resolve_alias(tracking, tmp_path, "fraud", "champion", cache)
    assert not list((cache / "fraud").iterdir())  # neither a final nor a temporary folder
