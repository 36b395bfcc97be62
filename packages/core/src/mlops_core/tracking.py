"""MLflow tracking: the URI from config, experiment set-up, and a run that records its lineage.

MLflow is imported inside functions: importing this module must stay cheap and side-effect free.
"""

from __future__ import annotations

import json
import logging
import os
import platform as _platform
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlops_config import TrackingConfig
from mlops_core.errors import TrackingError
from mlops_core.lineage import git_info

if TYPE_CHECKING:
    from mlflow.entities import Run

log = logging.getLogger(__name__)


def resolve_uri(uri: str, root: Path) -> str:
    """Make a relative ``sqlite:///`` or plain-path URI absolute against ``root``; others pass through."""
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return f"sqlite:///{(root / uri.removeprefix('sqlite:///')).resolve()}"
    if "://" not in uri:
        return str((root / uri).resolve())
    return uri


def configure_tracking(section: TrackingConfig, root: Path) -> str:
    """Point MLflow at the configured tracking + registry URIs; create local folders. Returns the URI."""
    import mlflow

    uri = resolve_uri(section.uri, root)
    if uri.startswith("sqlite:///"):
        Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    for var in (section.username_env, section.password_env):
        if var and var not in os.environ:
            raise TrackingError(f"tracking secret env var {var!r} is not set; export it before contacting {uri!r}")
    if section.username_env:
        os.environ["MLFLOW_TRACKING_USERNAME"] = os.environ[section.username_env]
    if section.password_env:
        os.environ["MLFLOW_TRACKING_PASSWORD"] = os.environ[section.password_env]
    if section.s3_endpoint_url_env and section.s3_endpoint_url_env in os.environ:
        os.environ["MLFLOW_S3_ENDPOINT_URL"] = os.environ[section.s3_endpoint_url_env]
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(resolve_uri(section.registry_uri, root) if section.registry_uri else uri)
    return uri


def ensure_experiment(section: TrackingConfig, root: Path) -> str:
    """Create the configured experiment if missing (artifacts under ``artifact_location``); return its id."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient()
    try:
        exp = client.get_experiment_by_name(section.experiment)
        if exp is not None:
            return exp.experiment_id
        location = section.artifact_location
        if "://" not in location:
            path = (root / location).resolve()
            path.mkdir(parents=True, exist_ok=True)
            location = path.as_uri()
        return client.create_experiment(section.experiment, artifact_location=location)
    except Exception as exc:  # MLflow raises many types for an unreachable or refusing server
        if isinstance(exc, TrackingError):
            raise
        raise TrackingError(f"cannot set up experiment {section.experiment!r} at {section.uri!r}: {exc}") from exc


def registered_model_name(section: TrackingConfig, model: str) -> str:
    """Registry name of a model config (``fraud`` → ``<prefix>fraud``)."""
    return f"{section.registered_model_prefix}{model}"


def flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` → ``{"a.b": 1}`` (lists and tuples stay values)."""
    out: dict[str, Any] = {}
    for key, val in values.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(val, Mapping):
            out.update(flatten(val, path))
        else:
            out[path] = val
    return out


@contextmanager
def start_run(
    section: TrackingConfig,
    root: Path,
    *,
    run_name: str,
    seed: int,
    config: Mapping[str, Any] | None = None,
    data_hash: str | None = None,
    tags: Mapping[str, str] | None = None,
) -> Iterator[Run]:
    """An MLflow run that records seed, git commit + dirty flag, data hash and the resolved config.

    The resolved config goes in twice: flattened as params (searchable) and whole as ``config.json``.
    """
    import mlflow

    configure_tracking(section, root)
    experiment_id = ensure_experiment(section, root)
    git = git_info(root)
    all_tags = {
        "mlops.seed": str(seed),
        "mlops.git_commit": git.commit,
        "mlops.git_dirty": str(git.dirty).lower(),
        "mlops.host": _platform.node(),
        **({"mlops.data_hash": data_hash} if data_hash else {}),
        **(tags or {}),
    }
    with mlflow.start_run(experiment_id=experiment_id, run_name=run_name, tags=all_tags) as run:
        if config is not None:
            params = {k: json.dumps(v) if isinstance(v, (list, tuple)) else v for k, v in flatten(config).items()}
            items = list(params.items())
            for i in range(0, len(items), 100):  # MLflow caps a batch at 100 params
                mlflow.log_params(dict(items[i : i + 100]))
            mlflow.log_dict(dict(config), "config.json")
        started = time.perf_counter()
        yield run
        mlflow.log_metric("run_wall_seconds", time.perf_counter() - started)
