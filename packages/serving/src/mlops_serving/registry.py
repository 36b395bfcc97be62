"""Resolve what to serve: a registry alias becomes one immutable version, downloaded to a local folder."""

from __future__ import annotations

import logging
from pathlib import Path

from mlops_config import TrackingConfig
from mlops_core.tracking import configure_tracking, registered_model_name
from mlops_model import META_FILE
from mlops_serving.errors import ModelLoadError
from mlops_serving.served import ModelRef

log = logging.getLogger(__name__)


def resolve_alias(tracking: TrackingConfig, root: Path, model: str, alias: str, cache_dir: Path) -> ModelRef:
    """Resolve ``alias`` of registered model ``model`` to a version once and download its exported folder.

    Raises:
        ModelLoadError: the registry is unreachable, the alias is not set, or the artifacts have no model.json.
    """
    import mlflow
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    name = registered_model_name(tracking, model)
    try:
        configure_tracking(tracking, root)
        version = MlflowClient().get_model_version_by_alias(name, alias)
    except MlflowException as exc:
        raise ModelLoadError(
            f"cannot resolve alias {alias!r} of registered model {name!r}: {exc.message}; "
            f"promote a version to {alias!r} first (mlops registry promote)"
        ) from None
    except Exception as exc:  # a down tracking server raises requests/SQLAlchemy errors
        raise ModelLoadError(f"cannot reach the model registry at {tracking.uri!r}: {exc}") from None
    target = cache_dir / name / str(version.version)
    try:
        if not any(target.rglob(META_FILE)):
            target.mkdir(parents=True, exist_ok=True)
            mlflow.artifacts.download_artifacts(artifact_uri=f"models:/{name}/{version.version}", dst_path=str(target))
    except Exception as exc:  # artifact stores raise many types
        raise ModelLoadError(f"cannot download {name!r} version {version.version}: {exc}") from None
    folder = find_exported_folder(target)
    log.info("alias %s of %s resolved to version %s", alias, name, version.version)
    return ModelRef(name=model, version=str(version.version), folder=folder, alias=alias, source="registry")


def find_exported_folder(path: Path) -> Path:
    """The folder holding ``model.json`` at or below ``path`` (the exported model's root)."""
    hits = sorted(path.rglob(META_FILE), key=lambda p: len(p.parts))
    if not hits:
        raise ModelLoadError(f"no {META_FILE} under {str(path)!r}; the registered version is not an exported model")
    return hits[0].parent
