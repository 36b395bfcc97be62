"""Shared platform core: errors, logging, seeding, lineage and MLflow tracking."""

from mlops_core.atomic import atomic_dir, atomic_path, atomic_write_bytes, atomic_write_text
from mlops_core.errors import ConfigError, PlatformError, TrackingError
from mlops_core.lineage import GitInfo, git_info, hash_files
from mlops_core.logs import setup_logging
from mlops_core.seed import seed_everything
from mlops_core.tracking import configure_tracking, ensure_experiment, registered_model_name, resolve_uri, start_run

__all__ = [
    "ConfigError",
    "GitInfo",
    "PlatformError",
    "TrackingError",
    "atomic_dir",
    "atomic_path",
    "atomic_write_bytes",
    "atomic_write_text",
    "configure_tracking",
    "ensure_experiment",
    "git_info",
    "hash_files",
    "registered_model_name",
    "resolve_uri",
    "seed_everything",
    "setup_logging",
    "start_run",
]
