"""One MLflow client per tracking section: no process-global URI, no env writes, two servers side by side."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mlops_config import TrackingConfig
from mlops_core import TrackingError, mlflow_client, start_run, tracking_scope


def _section(name: str) -> TrackingConfig:
    return TrackingConfig(uri=f"sqlite:///{name}/mlflow.db", artifact_location=f"{name}/artifacts", experiment=name)


def test_two_clients_for_two_stores_do_not_interfere_and_touch_no_global(tmp_path: Path) -> None:
    import mlflow

    env_before, uri_before = dict(os.environ), mlflow.get_tracking_uri()
    a, b = mlflow_client(_section("a"), tmp_path), mlflow_client(_section("b"), tmp_path)
    a.create_registered_model("only-in-a")
    b.create_registered_model("only-in-b")
    assert [m.name for m in a.search_registered_models()] == ["only-in-a"]
    assert [m.name for m in b.search_registered_models()] == ["only-in-b"]
    assert a.tracking_uri == f"sqlite:///{tmp_path / 'a' / 'mlflow.db'}"
    assert (tmp_path / "a" / "mlflow.db").is_file() and (tmp_path / "b" / "mlflow.db").is_file()
    assert dict(os.environ) == env_before
    assert mlflow.get_tracking_uri() == uri_before


def test_a_run_uses_its_store_and_restores_the_global_uri(tmp_path: Path) -> None:
    import mlflow

    uri_before = mlflow.get_tracking_uri()
    with start_run(_section("a"), tmp_path, run_name="r", seed=1) as run:
        assert mlflow.get_tracking_uri() == f"sqlite:///{tmp_path / 'a' / 'mlflow.db'}"
        mlflow.log_metric("m", 1.0)
    assert mlflow.get_tracking_uri() == uri_before
    got = mlflow_client(_section("a"), tmp_path).get_run(run.info.run_id)
    assert got.data.metrics["m"] == 1.0
    with pytest.raises(RuntimeError), tracking_scope(_section("b"), tmp_path):
        raise RuntimeError("restored on the way out too")
    assert mlflow.get_tracking_uri() == uri_before


def test_a_secret_under_a_name_mlflow_does_not_read_is_refused(tmp_path: Path) -> None:
    section = TrackingConfig(uri="http://127.0.0.1:1", username_env="TEAM_MLFLOW_USER")
    with pytest.raises(TrackingError, match=r"tracking.username_env = 'TEAM_MLFLOW_USER'.*'MLFLOW_TRACKING_USERNAME'"):
        mlflow_client(section, tmp_path)
    unset = TrackingConfig(uri="http://127.0.0.1:1", password_env="MLFLOW_TRACKING_PASSWORD")
    if "MLFLOW_TRACKING_PASSWORD" not in os.environ:
        with pytest.raises(TrackingError, match="'MLFLOW_TRACKING_PASSWORD' is not set"):
            mlflow_client(unset, tmp_path)
