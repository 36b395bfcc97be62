"""``tracking``: MLflow tracking server and model registry."""

from __future__ import annotations

from pydantic import Field

from mlops_config._base import Section


class TrackingConfig(Section):
    uri: str = "sqlite:///.mlops/mlflow.db"
    """MLflow tracking URI. ``sqlite:///relative/path`` is resolved against the repo root."""

    registry_uri: str | None = None
    """MLflow registry URI; ``None`` means the same as ``uri``."""

    artifact_location: str = ".mlops/mlartifacts"
    """Where new experiments store artifacts (a folder, or ``s3://bucket/prefix`` on a cluster)."""

    experiment: str = "mlops"
    """MLflow experiment that runs are logged to. Unset in every layer: ``project.name`` (a model file that shares
    the base's project names its own, as ``configs/models/llm-sft.yaml`` does)."""

    registered_model_prefix: str = ""
    """Prefix for registered model names (e.g. ``team-a-``), so several teams can share one registry."""

    log_batch_size: int = Field(default=200, ge=1, le=1000)
    """Metrics buffered per ``log_batch`` call; MLflow caps one batch at 1000 metrics."""

    username_env: str | None = None
    """Name of the env var that holds the MLflow username (secret; the value is never written in config)."""

    password_env: str | None = None
    """Name of the env var that holds the MLflow password (secret; the value is never written in config)."""

    s3_endpoint_url_env: str | None = None
    """Name of the env var that holds the S3 endpoint URL for artifacts (e.g. MinIO)."""
