"""Shared platform core: errors, logging, seeding, lineage and MLflow tracking."""

from mlops_core.errors import ConfigError, PlatformError, TrackingError
from mlops_core.lineage import GitInfo, git_info, hash_files
from mlops_core.logs import setup_logging
from mlops_core.seed import seed_everything
from mlops_core.tracking import (
    ensure_experiment,
    mlflow_client,
    registered_model_name,
    resolve_uri,
    start_run,
    tracking_scope,
    tracking_uris,
)

__all__ = [
    "ConfigError",
    "GitInfo",
    "PlatformError",
    "TrackingError",
    "ensure_experiment",
    "git_info",
    "hash_files",
    "mlflow_client",
    "registered_model_name",
    "resolve_uri",
    "seed_everything",
    "setup_logging",
    "start_run",
    "tracking_scope",
    "tracking_uris",
]
