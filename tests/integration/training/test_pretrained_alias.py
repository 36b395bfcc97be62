"""A pretrained checkpoint named by a registry alias (``models:/<name>@champion``, what the LM fine-tune's
PyTorchJob names) is pinned to the version the alias names at each resolve: when the alias moves, the next
fine-tune downloads the new version instead of reusing the cached copy of the old one (the cache lives on the
job's persistent volume)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlops_config import TrackingConfig
from mlops_training.errors import TrainingError
from mlops_training.pretrained import resolve_checkpoint

pytestmark = [pytest.mark.integration]


def _folder(path: Path, tag: str) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"model_type": "llama", "tag": tag}))
    (path / "model.safetensors").write_bytes(tag.encode())
    return path


def test_a_moved_alias_is_downloaded_again_not_served_from_the_cache(tmp_path: Path) -> None:
    import mlflow
    from mlflow import MlflowClient

    tracking = TrackingConfig(uri=f"sqlite:///{tmp_path / 'mlflow.db'}", artifact_location=str(tmp_path / "art"))
    client = MlflowClient(tracking_uri=tracking.uri, registry_uri=tracking.uri)
    client.create_registered_model("base")
    mlflow.set_tracking_uri(tracking.uri)
    exp = client.create_experiment("pretrained", artifact_location=(tmp_path / "art").as_uri())
    for tag in ("one", "two"):
        with mlflow.start_run(experiment_id=exp) as run:
            mlflow.log_artifacts(str(_folder(tmp_path / tag, tag)), artifact_path="model")
        client.create_model_version("base", f"runs:/{run.info.run_id}/model", run_id=run.info.run_id)
    cache = tmp_path / "cache"

    client.set_registered_model_alias("base", "champion", "1")
    first = resolve_checkpoint("models:/base@champion", tmp_path, cache, tracking)
    assert json.loads((first / "config.json").read_text())["tag"] == "one"
    client.set_registered_model_alias("base", "champion", "2")
    second = resolve_checkpoint("models:/base@champion", tmp_path, cache, tracking)
    assert json.loads((second / "config.json").read_text())["tag"] == "two"
    # the version already fetched is still reused from the cache
    assert resolve_checkpoint("models:/base/1", tmp_path, cache, tracking) == first

    with pytest.raises(TrainingError, match=r"alias 'nope' of registered model 'base'"):
        resolve_checkpoint("models:/base@nope", tmp_path, cache, tracking)


def test_a_fine_tune_from_an_alias_records_the_version_it_started_from(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """``train_model`` pins ``models:/<name>@champion`` before the workers start: the config every rank gets and
    the run records names ``models:/<name>/<version>``, so a replay after the alias moved starts from the same
    weights. A local checkpoint and a version URI pass through unchanged."""
    from mlflow import MlflowClient

    from mlops_config import load_config
    from mlops_training import api
    from mlops_training.pretrained import pin_checkpoint_alias

    tracking = TrackingConfig(uri=f"sqlite:///{tmp_path / 'mlflow.db'}", artifact_location=str(tmp_path / "art"))
    client = MlflowClient(tracking_uri=tracking.uri, registry_uri=tracking.uri)
    client.create_registered_model("base")
    for _ in range(3):
        client.create_model_version("base", "file:///nowhere", run_id=None)
    client.set_registered_model_alias("base", "champion", "2")
    loaded = load_config(model="llm-sft", overrides=["training.causal_lm.checkpoint=models:/base@champion"],
                         check_secrets=False)
    config = loaded.config.model_copy(update={"tracking": tracking})
    launched: list[str | None] = []
    monkeypatch.setattr(api, "launch", lambda cfg, root, **_: launched.append(cfg.training.causal_lm.checkpoint))
    api.train_model(config, tmp_path, track=False)
    client.set_registered_model_alias("base", "champion", "3")  # the alias moves on; the run's start does not
    assert launched == ["models:/base/2"]
    for fixed in ("models:/base/1", "data/llm/base"):
        same = config.model_copy(update={"training": config.training.model_copy(update={
            "causal_lm": config.training.causal_lm.model_copy(update={"checkpoint": fixed})})})
        assert pin_checkpoint_alias(same, tmp_path) is same
    gone = config.model_copy(update={"training": config.training.model_copy(update={
        "causal_lm": config.training.causal_lm.model_copy(update={"checkpoint": "models:/gone@champion"})})})
    with pytest.raises(TrainingError, match=r"alias 'champion' of registered model 'gone'"):
        pin_checkpoint_alias(gone, tmp_path)
