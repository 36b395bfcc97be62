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
from mlops_core.redact import redact_credentials, redact_tree

if TYPE_CHECKING:
    from mlflow.entities import Run
    from mlflow.tracking import MlflowClient

log = logging.getLogger(__name__)


def resolve_uri(uri: str, root: Path) -> str:
    """Make a relative ``sqlite:///`` or plain-path URI absolute against ``root``; others pass through."""
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return f"sqlite:///{(root / uri.removeprefix('sqlite:///')).resolve()}"
    if "://" not in uri:
        return str((root / uri).resolve())
    return uri


# MLflow reads credentials and the S3 endpoint only from these variables (mlflow.utils.credentials,
# the S3 artifact repository; boto3 reads the AWS_* ones): the config names one of them, we never copy values.
_READ_BY_MLFLOW = {
    "username_env": ("MLFLOW_TRACKING_USERNAME",),
    "password_env": ("MLFLOW_TRACKING_PASSWORD",),
    "s3_endpoint_url_env": ("MLFLOW_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
}


def tracking_uris(section: TrackingConfig, root: Path) -> tuple[str, str]:
    """The resolved ``(tracking, registry)`` URIs; creates the folder of a local SQLite store.

    Raises:
        TrackingError: a configured secret env var is unset, or names a variable MLflow does not read.
    """
    uri = resolve_uri(section.uri, root)
    if uri.startswith("sqlite:///"):
        Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    for key, allowed in _READ_BY_MLFLOW.items():
        var = getattr(section, key)
        if var is None:
            continue
        if var not in allowed:
            raise TrackingError(f"tracking.{key} = {var!r}; MLflow reads this secret only from "
                                f"{' or '.join(map(repr, allowed))}: name one of those and export it there")
        if key != "s3_endpoint_url_env" and var not in os.environ:
            raise TrackingError(f"tracking secret env var {var!r} is not set; export it before contacting "
                                f"{redact_credentials(uri)!r}")
    return uri, resolve_uri(section.registry_uri, root) if section.registry_uri else uri


def mlflow_client(section: TrackingConfig, root: Path) -> MlflowClient:
    """An ``MlflowClient`` bound to the section's tracking and registry URIs.

    The one way packages reach MLflow: no process-global URI is set and no env var is written, so two
    clients for two tracking servers work side by side in one process.
    """
    from mlflow.tracking import MlflowClient

    uri, registry = tracking_uris(section, root)
    return MlflowClient(tracking_uri=uri, registry_uri=registry)


@contextmanager
def tracking_scope(section: TrackingConfig, root: Path) -> Iterator[MlflowClient]:
    """The section's URIs as MLflow's process-global ones for the block, the previous ones restored after.

    Only for MLflow's fluent API (``mlflow.start_run``, ``mlflow.log_*``), which has no client argument;
    everything else takes :func:`mlflow_client`. Yields that client.
    """
    import mlflow
    from mlflow.tracking import MlflowClient

    uri, registry = tracking_uris(section, root)
    client = MlflowClient(tracking_uri=uri, registry_uri=registry)
    previous = (mlflow.get_tracking_uri(), mlflow.get_registry_uri())
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(registry)
    try:
        yield client
    finally:
        mlflow.set_tracking_uri(previous[0])
        mlflow.set_registry_uri(previous[1])


def ensure_experiment(section: TrackingConfig, root: Path) -> str:
    """Create the configured experiment if missing (artifacts under ``artifact_location``); return its id."""
    client = mlflow_client(section, root)
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
    MLflow's fluent API needs the global tracking URI: it is set for the run's block and restored after
    (:func:`tracking_scope`).
    """
    import mlflow

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
    with tracking_scope(section, root), mlflow.start_run(experiment_id=experiment_id, run_name=run_name,
                                                          tags=all_tags) as run:
        if config is not None:
            config = redact_tree(config)  # no URL's password in params or config.json (mlops_core.redact)
            params = {k: json.dumps(v) if isinstance(v, (list, tuple)) else v for k, v in flatten(config).items()}
            items = list(params.items())
            for i in range(0, len(items), 100):  # MLflow caps a batch at 100 params
                mlflow.log_params(dict(items[i : i + 100]))
            mlflow.log_dict(dict(config), "config.json")
        started = time.perf_counter()
        yield run
        mlflow.log_metric("run_wall_seconds", time.perf_counter() - started)
